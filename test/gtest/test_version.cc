/*
 * The load-time version check: only the exact UCX release the module was
 * built against is accepted, and a refusal says which releases differ.
 */

#include <gtest/gtest.h>

extern "C" {
#include <uct/ib_gdr/rc_gdr_glue.h>
}

#include <string>


static uct_rc_gdr_ucx_version_t built()
{
    uct_rc_gdr_ucx_version_t v;

    uct_rc_gdr_glue_built_version(&v);
    return v;
}

TEST(test_rc_gdr_version, exact_release_accepted)
{
    uct_rc_gdr_ucx_version_t v = built();
    char reason[256] = "";

    EXPECT_EQ(UCS_OK, uct_rc_gdr_glue_version_check(&v, reason,
                                                    sizeof(reason)));
}

TEST(test_rc_gdr_version, other_releases_refused_with_reason)
{
    const uct_rc_gdr_ucx_version_t b = built();
    const uct_rc_gdr_ucx_version_t others[] = {
        {b.major, b.minor + 5, 1},
        {b.major, b.minor, b.patch + 1},
        {b.major + 1, b.minor, b.patch},
        {0, 0, 0}
    };
    char reason[256];

    for (const auto &v : others) {
        reason[0] = '\0';
        EXPECT_EQ(UCS_ERR_UNSUPPORTED,
                  uct_rc_gdr_glue_version_check(&v, reason, sizeof(reason)));
        std::string expected = std::to_string(v.major) + "." +
                               std::to_string(v.minor) + "." +
                               std::to_string(v.patch);
        EXPECT_NE(std::string::npos, std::string(reason).find(expected))
                << reason;
        EXPECT_NE(std::string::npos,
                  std::string(reason).find("not registered")) << reason;
    }
}

/* The process running these tests links the UCX the build is for: the
 * running release is found (through libucp) and is that one. */
TEST(test_rc_gdr_version, running_release_found)
{
    uct_rc_gdr_ucx_version_t v, b = built();

    ASSERT_EQ(UCS_OK, uct_rc_gdr_glue_running_version(&v));
    EXPECT_EQ(b.major, v.major);
    EXPECT_EQ(b.minor, v.minor);
    EXPECT_EQ(b.patch, v.patch);
}

/*
 * The UCT API of the release rc_gdr runs in, called the way UCP calls it
 * (through libuct's public entry points, which dispatch into the glue):
 * md attributes (v2 where the release has them: cache_mem_types,
 * reg_alignment, global_id...), the v2 connect (1.14 on), reachability with
 * a reason (1.15 on), whether an endpoint is connected to a given peer and
 * remote key comparison (1.16 on), and iface_query_v2 (1.22). What a
 * release does not have skips.
 *
 * See file LICENSE for terms.
 */

#include "uct_rc_gdr_test.h"

#include <uct/ib_gdr/rc_gdr_glue.h> /* which API this release has */

#include <inttypes.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>


class release : public uct_rc_gdr_pair_test {
protected:
    /* Whether a's endpoint is connected to the peer at dev, ep */
    int is_connected(const void *dev, const void *ep);
};


TEST_F(release, md_attr)
{
    UCT_TEST_EXPECT(!strcmp(a->md_attr.component_name, UCT_TEST_TL_NAME),
                    "component '%s'", a->md_attr.component_name);
    UCT_TEST_EXPECT(a->md_attr.cap.reg_mem_types &
                    UCS_BIT(UCS_MEMORY_TYPE_HOST),
                    "host memory registered");
    UCT_TEST_EXPECT(a->md_attr.rkey_packed_size > 0,
                    "packed rkey of %zu bytes", a->md_attr.rkey_packed_size);
}


#if UCT_RC_GDR_HAVE_V2_API

TEST_F(release, md_attr_v2)
{
    static const char zero[UCT_MD_GLOBAL_ID_MAX] = {};
    uct_md_attr_v2_t attr;
    ucs_status_t status;

    memset(&attr, 0, sizeof(attr));
    attr.field_mask = UCT_MD_ATTR_FIELD_FLAGS |
                      UCT_MD_ATTR_FIELD_REG_MEM_TYPES |
                      UCT_MD_ATTR_FIELD_CACHE_MEM_TYPES |
                      UCT_MD_ATTR_FIELD_GLOBAL_ID |
                      UCT_MD_ATTR_FIELD_RKEY_PACKED_SIZE |
                      UCT_MD_ATTR_FIELD_EXPORTED_MKEY_PACKED_SIZE |
                      UCT_MD_ATTR_FIELD_COMPONENT_NAME;
#if UCT_RC_GDR_HAVE_REG_ALIGNMENT
    attr.field_mask |= UCT_MD_ATTR_FIELD_REG_ALIGNMENT;
#endif
    status = uct_md_query_v2(a->md, &attr);
    ASSERT_EQ(UCS_OK, status) << ucs_status_string(status);
    UCT_TEST_EXPECT((attr.cache_mem_types & attr.reg_mem_types) ==
                    attr.reg_mem_types,
                    "every registered memory type may be cached "
                    "(reg 0x%" PRIx64 ", cache 0x%" PRIx64 ")",
                    attr.reg_mem_types, attr.cache_mem_types);
#if UCT_RC_GDR_HAVE_REG_ALIGNMENT
    EXPECT_GE(attr.reg_alignment, 1u);
#endif
    EXPECT_NE(0, memcmp(attr.global_id, zero, sizeof(zero)))
        << "global_id names the device";
    EXPECT_EQ(0u, attr.exported_mkey_packed_size) << "no exported keys";
    UCT_TEST_EXPECT((attr.rkey_packed_size == a->md_attr.rkey_packed_size) &&
                    !strcmp(attr.component_name, UCT_TEST_TL_NAME),
                    "v2 agrees with v1 (rkey %zu, component '%s')",
                    attr.rkey_packed_size, attr.component_name);
}

#if UCT_RC_GDR_HAVE_IS_REACHABLE_V2

TEST_F(release, is_reachable_v2)
{
    uct_iface_is_reachable_params_t params;
    unsigned char garbage[UCT_TEST_ADDR_MAX];
    char info[128];

    memset(&params, 0, sizeof(params));
    /* both addresses, as UCP gives them (1.15 refuses one alone); rc_gdr's
     * interface address is empty */
    params.field_mask         = UCT_IFACE_IS_REACHABLE_FIELD_DEVICE_ADDR |
                                UCT_IFACE_IS_REACHABLE_FIELD_IFACE_ADDR |
                                UCT_IFACE_IS_REACHABLE_FIELD_INFO_STRING |
                                UCT_IFACE_IS_REACHABLE_FIELD_INFO_STRING_LENGTH |
                                UCT_IFACE_IS_REACHABLE_FIELD_SCOPE;
    params.device_addr        = (const uct_device_addr_t*)wb.dev;
    params.iface_addr         = NULL;
    params.info_string        = info;
    params.info_string_length = sizeof(info);
    params.scope              = UCT_IFACE_REACHABILITY_SCOPE_NETWORK;
    info[0]                   = '\0';
    EXPECT_TRUE(uct_iface_is_reachable_v2(a->iface, &params))
        << "the peer's device";

    memset(garbage, 0x5a, sizeof(garbage));
    params.device_addr = (const uct_device_addr_t*)garbage;
    UCT_TEST_EXPECT(!uct_iface_is_reachable_v2(a->iface, &params) &&
                    (info[0] != '\0'),
                    "a corrupt address refused, why: '%s'", info);
}

#else

TEST_F(release, is_reachable_v2)
{
    GTEST_SKIP() << "is_reachable v2: not in this UCX release";
}

#endif /* UCT_RC_GDR_HAVE_IS_REACHABLE_V2 */

#if UCT_RC_GDR_HAVE_EP_IS_CONNECTED

int release::is_connected(const void *dev, const void *ep)
{
    uct_ep_is_connected_params_t params;

    params.field_mask  = UCT_EP_IS_CONNECTED_FIELD_DEVICE_ADDR |
                         UCT_EP_IS_CONNECTED_FIELD_EP_ADDR;
    params.device_addr = (const uct_device_addr_t*)dev;
    params.iface_addr  = NULL;
    params.ep_addr     = (const uct_ep_addr_t*)ep;
    return uct_ep_is_connected(a->ep, &params);
}

TEST_F(release, ep_is_connected)
{
    uct_test_node_t *c;
    uct_test_wire_t wc;

    /* another QP on the peer's device: QP numbers differ within a device
     * (not across devices: a's own may equal b's) */
    c = node_open(dev_b(), 0);
    uct_test_node_wire(c, &wc);
    EXPECT_TRUE(is_connected(wb.dev, wb.ep))
        << "to the peer it was connected to";
    EXPECT_FALSE(is_connected(wb.dev, wc.ep))
        << "not to another QP of that device";
    EXPECT_FALSE(is_connected(wa.dev, wb.ep))
        << "not to that QP number on another device";
}

#else

TEST_F(release, ep_is_connected)
{
    GTEST_SKIP() << "ep_is_connected: not in this UCX release";
}

#endif /* UCT_RC_GDR_HAVE_EP_IS_CONNECTED */

#if UCT_RC_GDR_HAVE_RKEY_COMPARE

TEST_F(release, rkey_compare)
{
    uct_rkey_compare_params_t params = {};
    uct_rkey_bundle_t k1, k2;
    int r12 = 0, r21 = 0, r11 = 1;

    ASSERT_EQ(UCS_OK, uct_rkey_unpack(a->component, wb.rkey, &k1));
    /* another key: a's own buffer, packed by a */
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(a->component, a->rkey_buf, &k2));

    uct_rkey_compare(a->component, k1.rkey, k1.rkey, &params, &r11);
    uct_rkey_compare(a->component, k1.rkey, k2.rkey, &params, &r12);
    uct_rkey_compare(a->component, k2.rkey, k1.rkey, &params, &r21);
    UCT_TEST_EXPECT((r11 == 0) && (r12 != 0) && (r12 == -r21),
                    "equal keys 0, different keys ordered (%d, %d, %d)",
                    r11, r12, r21);
    params.field_mask = 1;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rkey_compare(a->component, k1.rkey, k2.rkey, &params, &r12))
        << "unknown parameters refused";
    uct_rkey_release(a->component, &k1);
    uct_rkey_release(a->component, &k2);
}

#else

TEST_F(release, rkey_compare)
{
    GTEST_SKIP() << "rkey_compare: not in this UCX release";
}

#endif /* UCT_RC_GDR_HAVE_RKEY_COMPARE */

/* A second pair connected by the v2 call, with the address lengths */
TEST_F(release, connect_to_ep_v2)
{
    uct_test_node_t *c = node_open(dev_a(), 4096);
    uct_test_node_t *d = node_open(dev_b(), 4096);
    uct_test_node_t *cd[2] = {c, d};
    uct_ep_connect_to_ep_params_t params;
    uct_rkey_bundle_t rkey;
    uct_test_wire_t wc, wd;
    ucs_status_t status;

    uct_test_node_wire(c, &wc);
    uct_test_node_wire(d, &wd);
    params.field_mask         = UCT_EP_CONNECT_TO_EP_PARAM_FIELD_DEVICE_ADDR_LENGTH |
                                UCT_EP_CONNECT_TO_EP_PARAM_FIELD_EP_ADDR_LENGTH;
    params.device_addr_length = c->iface_attr.device_addr_len;
    params.ep_addr_length     = c->iface_attr.ep_addr_len;
    ASSERT_EQ(UCS_OK, uct_ep_connect_to_ep_v2(c->ep, (uct_device_addr_t*)wd.dev,
                                              (uct_ep_addr_t*)wd.ep, &params));
    ASSERT_EQ(UCS_OK, uct_ep_connect_to_ep_v2(d->ep, (uct_device_addr_t*)wc.dev,
                                              (uct_ep_addr_t*)wc.ep, &params));

    ASSERT_EQ(UCS_OK, uct_rkey_unpack(c->component, wd.rkey, &rkey));
    status = UCT_TEST_RETRY(cd, 2,
                            uct_ep_put_short(c->ep, "v2", 3, wd.buf,
                                             rkey.rkey));
    if (status == UCS_OK) {
        status = uct_test_ep_flush(cd, 2, c->ep);
    }
    uct_rkey_release(c->component, &rkey);
    UCT_TEST_EXPECT((status == UCS_OK) && !memcmp(d->buf, "v2", 3),
                    "a put arrives over it (%s)", ucs_status_string(status));
}

/* A truncated address, with the length UCX gives, is refused by that
 * length: not one byte past its end is read (here an inaccessible page
 * follows it, so a read past it would crash the test) */
TEST_F(release, connect_to_ep_v2_truncated_refused)
{
    uct_test_node_t *c   = node_open(dev_a(), 0);
    uct_test_node_t *d   = node_open(dev_b(), 0);
    size_t page          = sysconf(_SC_PAGESIZE);
    size_t dev_len       = d->iface_attr.device_addr_len;
    size_t ep_len        = d->iface_attr.ep_addr_len;
    uct_ep_connect_to_ep_params_t params;
    uct_test_wire_t wd;
    ucs_status_t status;
    char *pages, *dev, *ep;

    uct_test_node_wire(d, &wd);
    pages = (char*)mmap(NULL, 2 * page, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(MAP_FAILED, (void*)pages);
    ASSERT_EQ(0, mprotect(pages + page, page, PROT_NONE));

    /* Each address in turn cut short, its last byte the page's last */
    for (int cut = 0; cut < 2; ++cut) {
        params.field_mask         =
                UCT_EP_CONNECT_TO_EP_PARAM_FIELD_DEVICE_ADDR_LENGTH |
                UCT_EP_CONNECT_TO_EP_PARAM_FIELD_EP_ADDR_LENGTH;
        params.device_addr_length = (cut == 0) ? dev_len / 2 : dev_len;
        params.ep_addr_length     = (cut == 1) ? ep_len / 2 : ep_len;
        dev = pages + page - params.device_addr_length -
              ((cut == 0) ? 0 : page / 2);
        ep  = pages + page - params.ep_addr_length -
              ((cut == 1) ? 0 : page / 2);
        memcpy(dev, wd.dev, params.device_addr_length);
        memcpy(ep, wd.ep, params.ep_addr_length);
        status = uct_ep_connect_to_ep_v2(c->ep, (uct_device_addr_t*)dev,
                                         (uct_ep_addr_t*)ep, &params);
        UCT_TEST_EXPECT(status != UCS_OK, "%s address of %zu of %zu bytes "
                        "refused (%s)", (cut == 0) ? "device" : "endpoint",
                        (cut == 0) ? params.device_addr_length :
                                     params.ep_addr_length,
                        (cut == 0) ? dev_len : ep_len,
                        ucs_status_string(status));
    }
    munmap(pages, 2 * page);
}

#else

TEST_F(release, v2_api)
{
    GTEST_SKIP() << "md query v2, connect_to_ep v2: not in this UCX release";
}

#endif /* UCT_RC_GDR_HAVE_V2_API */


#if UCT_RC_GDR_HAVE_IFACE_QUERY_V2

TEST_F(release, iface_query_v2)
{
    uct_iface_attr_v2_t attr;
    ucs_status_t status;

    memset(&attr, 0xff, sizeof(attr));
    attr.field_mask = UCT_IFACE_ATTR_FIELD_CAP_FLAGS |
                      UCT_IFACE_ATTR_FIELD_MAX_PUT_SGL_ZCOPY_COUNT |
                      UCT_IFACE_ATTR_FIELD_TX_TOKEN_LENGTH |
                      UCT_IFACE_ATTR_FIELD_RX_TOKEN_LENGTH;
    status = uct_iface_query_v2(a->iface, &attr);
    UCT_TEST_EXPECT((status == UCS_OK) && (attr.cap.flags == 0) &&
                    (attr.max_put_sgl_zcopy_count == 0) &&
                    (attr.tx_token_length == 0) && (attr.rx_token_length == 0),
                    "no SGL put, no tokens (%s)", ucs_status_string(status));

    attr.field_mask = UCT_IFACE_ATTR_FIELD_TX_TOKEN;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_iface_query_v2(a->iface, &attr))
        << "a token without its pair refused";
}

#else

TEST_F(release, iface_query_v2)
{
    GTEST_SKIP() << "iface_query_v2: not in this UCX release";
}

#endif

/**
 * A stand-in for getrandom(2), for unit tests of what the md does when the
 * kernel's generator fails. Linked into a test program that exports it
 * (test/mocks/mock_random.dynlist), it serves the module loaded later with
 * dlopen as well; it forwards to the kernel unless told to fail.
 *
 * See file LICENSE for terms.
 */

#ifndef RC_GDR_MOCK_RANDOM_H_
#define RC_GDR_MOCK_RANDOM_H_

#ifdef __cplusplus
extern "C" {
#endif

/* Every getrandom call fails with @a err (errno) until this is called with
 * 0 again */
void mock_random_fail(int err);

/* getrandom calls made, failed ones too */
unsigned mock_random_calls(void);

#ifdef __cplusplus
}
#endif

#endif

/*
 * The UCT API of the release rc_gdr runs in, called the way UCP calls it
 * (through libuct's public entry points, which dispatch into the glue):
 * md attributes (v2 where the release has them: cache_mem_types,
 * reg_alignment, global_id...), reachability with a reason, whether an
 * endpoint is connected to a given peer, remote key comparison, the v2
 * connect, and iface_query_v2 (1.22). Runs in the soft-RoCE guest:
 *
 *   uct_release DEV_A DEV_B
 *
 * Prints PASS/FAIL lines, "SKIP" for what this release does not have, and
 * "N passed, N failed".
 */

#include "uct_test_util.h"

#include <uct/ib_gdr/rc_gdr_glue.h> /* which API this release has */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>


static void check_md_attr(uct_test_node_t *a)
{
    uct_test_check(!strcmp(a->md_attr.component_name, UCT_TEST_TL_NAME),
                   "md attributes: component '%s'", a->md_attr.component_name);
    uct_test_check(a->md_attr.cap.reg_mem_types &
                   UCS_BIT(UCS_MEMORY_TYPE_HOST),
                   "md attributes: host memory registered");
    uct_test_check(a->md_attr.rkey_packed_size > 0,
                   "md attributes: packed rkey of %zu bytes",
                   a->md_attr.rkey_packed_size);
}


#if UCT_RC_GDR_HAVE_V2_API

static void check_md_attr_v2(uct_test_node_t *a)
{
    static const char zero[UCT_MD_GLOBAL_ID_MAX];
    uct_md_attr_v2_t attr;
    ucs_status_t status;

    memset(&attr, 0, sizeof(attr));
    attr.field_mask = UCT_MD_ATTR_FIELD_FLAGS |
                      UCT_MD_ATTR_FIELD_REG_MEM_TYPES |
                      UCT_MD_ATTR_FIELD_CACHE_MEM_TYPES |
                      UCT_MD_ATTR_FIELD_REG_ALIGNMENT |
                      UCT_MD_ATTR_FIELD_GLOBAL_ID |
                      UCT_MD_ATTR_FIELD_RKEY_PACKED_SIZE |
                      UCT_MD_ATTR_FIELD_EXPORTED_MKEY_PACKED_SIZE |
                      UCT_MD_ATTR_FIELD_COMPONENT_NAME;
    status = uct_md_query_v2(a->md, &attr);
    uct_test_check(status == UCS_OK, "md query v2 (%s)",
                   ucs_status_string(status));
    uct_test_check((attr.cache_mem_types & attr.reg_mem_types) ==
                   attr.reg_mem_types,
                   "md v2: every registered memory type may be cached "
                   "(reg 0x%" PRIx64 ", cache 0x%" PRIx64 ")",
                   attr.reg_mem_types, attr.cache_mem_types);
    uct_test_check(attr.reg_alignment >= 1, "md v2: reg_alignment %zu",
                   attr.reg_alignment);
    uct_test_check(memcmp(attr.global_id, zero, sizeof(zero)) != 0,
                   "md v2: global_id names the device");
    uct_test_check(attr.exported_mkey_packed_size == 0,
                   "md v2: no exported keys");
    uct_test_check((attr.rkey_packed_size ==
                    a->md_attr.rkey_packed_size) &&
                   !strcmp(attr.component_name, UCT_TEST_TL_NAME),
                   "md v2 agrees with v1 (rkey %zu, component '%s')",
                   attr.rkey_packed_size, attr.component_name);
}


static void check_reachable_v2(uct_test_node_t *a, const uct_test_wire_t *wb)
{
    uct_iface_is_reachable_params_t params;
    unsigned char garbage[UCT_TEST_ADDR_MAX];
    char info[128];

    memset(&params, 0, sizeof(params));
    params.field_mask         = UCT_IFACE_IS_REACHABLE_FIELD_DEVICE_ADDR |
                                UCT_IFACE_IS_REACHABLE_FIELD_INFO_STRING |
                                UCT_IFACE_IS_REACHABLE_FIELD_INFO_STRING_LENGTH |
                                UCT_IFACE_IS_REACHABLE_FIELD_SCOPE;
    params.device_addr        = (const uct_device_addr_t*)wb->dev;
    params.info_string        = info;
    params.info_string_length = sizeof(info);
    params.scope              = UCT_IFACE_REACHABILITY_SCOPE_NETWORK;
    info[0]                   = '\0';
    uct_test_check(uct_iface_is_reachable_v2(a->iface, &params),
                   "is_reachable v2: the peer's device");

    memset(garbage, 0x5a, sizeof(garbage));
    params.device_addr = (const uct_device_addr_t*)garbage;
    uct_test_check(!uct_iface_is_reachable_v2(a->iface, &params) &&
                   (info[0] != '\0'),
                   "is_reachable v2: a corrupt address refused, why: '%s'",
                   info);
}


static int is_connected(uct_test_node_t *a, const void *dev, const void *ep)
{
    uct_ep_is_connected_params_t params;

    params.field_mask  = UCT_EP_IS_CONNECTED_FIELD_DEVICE_ADDR |
                         UCT_EP_IS_CONNECTED_FIELD_EP_ADDR;
    params.device_addr = (const uct_device_addr_t*)dev;
    params.iface_addr  = NULL;
    params.ep_addr     = (const uct_ep_addr_t*)ep;
    return uct_ep_is_connected(a->ep, &params);
}


static void check_is_connected(uct_test_node_t *a, const uct_test_wire_t *wa,
                               const uct_test_wire_t *wb, const char *dev_b)
{
    uct_test_node_t c;
    uct_test_wire_t wc;

    /* another QP on the peer's device: QP numbers differ within a device
     * (not across devices: a's own may equal b's) */
    uct_test_node_open(&c, dev_b, 0);
    uct_test_node_wire(&c, &wc);
    uct_test_check(is_connected(a, wb->dev, wb->ep),
                   "ep_is_connected: to the peer it was connected to");
    uct_test_check(!is_connected(a, wb->dev, wc.ep),
                   "ep_is_connected: not to another QP of that device");
    uct_test_check(!is_connected(a, wa->dev, wb->ep),
                   "ep_is_connected: not to that QP number on another "
                   "device");
    uct_test_node_close(&c);
}


static void check_rkey_compare(uct_test_node_t *a, uct_test_node_t *b,
                               const uct_test_wire_t *wb)
{
    uct_rkey_compare_params_t params = {.field_mask = 0};
    uct_rkey_bundle_t k1, k2;
    int r12 = 0, r21 = 0, r11 = 1;
    ucs_status_t status;

    status = uct_rkey_unpack(a->component, wb->rkey, &k1);
    if (status == UCS_OK) {
        /* another key: a's own buffer, packed by a */
        status = uct_rkey_unpack(a->component, a->rkey_buf, &k2);
    }
    uct_test_check(status == UCS_OK, "rkey_compare: two keys unpacked (%s)",
                   ucs_status_string(status));
    if (status != UCS_OK) {
        return;
    }

    uct_rkey_compare(a->component, k1.rkey, k1.rkey, &params, &r11);
    uct_rkey_compare(a->component, k1.rkey, k2.rkey, &params, &r12);
    uct_rkey_compare(a->component, k2.rkey, k1.rkey, &params, &r21);
    uct_test_check((r11 == 0) && (r12 != 0) && (r12 == -r21),
                   "rkey_compare: equal keys 0, different keys ordered "
                   "(%d, %d, %d)", r11, r12, r21);
    params.field_mask = 1;
    uct_test_check(uct_rkey_compare(a->component, k1.rkey, k2.rkey, &params,
                                    &r12) == UCS_ERR_INVALID_PARAM,
                   "rkey_compare: unknown parameters refused");
    uct_rkey_release(a->component, &k1);
    uct_rkey_release(a->component, &k2);
}


/* A second pair connected by the v2 call, with the address lengths. */
static void check_connect_v2(const char *dev_a, const char *dev_b)
{
    uct_ep_connect_to_ep_params_t params;
    uct_test_node_t c, d;
    uct_test_wire_t wc, wd;
    uct_test_node_t *nodes[2] = {&c, &d};
    uct_rkey_bundle_t rkey;
    ucs_status_t status;

    uct_test_node_open(&c, dev_a, 4096);
    uct_test_node_open(&d, dev_b, 4096);
    uct_test_node_wire(&c, &wc);
    uct_test_node_wire(&d, &wd);
    params.field_mask         = UCT_EP_CONNECT_TO_EP_PARAM_FIELD_DEVICE_ADDR_LENGTH |
                                UCT_EP_CONNECT_TO_EP_PARAM_FIELD_EP_ADDR_LENGTH;
    params.device_addr_length = c.iface_attr.device_addr_len;
    params.ep_addr_length     = c.iface_attr.ep_addr_len;
    status = uct_ep_connect_to_ep_v2(c.ep, (uct_device_addr_t*)wd.dev,
                                     (uct_ep_addr_t*)wd.ep, &params);
    if (status == UCS_OK) {
        status = uct_ep_connect_to_ep_v2(d.ep, (uct_device_addr_t*)wc.dev,
                                         (uct_ep_addr_t*)wc.ep, &params);
    }
    uct_test_check(status == UCS_OK, "connect_to_ep v2 (%s)",
                   ucs_status_string(status));
    if (status == UCS_OK) {
        status = uct_rkey_unpack(c.component, wd.rkey, &rkey);
        if (status == UCS_OK) {
            status = UCT_TEST_RETRY(nodes, 2,
                                    uct_ep_put_short(c.ep, "v2", 3, wd.buf,
                                                     rkey.rkey));
            if (status == UCS_OK) {
                status = uct_test_ep_flush(nodes, 2, c.ep);
            }
            uct_rkey_release(c.component, &rkey);
        }
        uct_test_check((status == UCS_OK) && !memcmp(d.buf, "v2", 3),
                       "connect_to_ep v2: a put arrives over it (%s)",
                       ucs_status_string(status));
    }
    uct_test_node_close(&c);
    uct_test_node_close(&d);
}

#endif /* UCT_RC_GDR_HAVE_V2_API */


#if UCT_RC_GDR_HAVE_IFACE_QUERY_V2
static void check_iface_query_v2(uct_test_node_t *a)
{
    uct_iface_attr_v2_t attr;
    ucs_status_t status;

    memset(&attr, 0xff, sizeof(attr));
    attr.field_mask = UCT_IFACE_ATTR_FIELD_CAP_FLAGS |
                      UCT_IFACE_ATTR_FIELD_MAX_PUT_SGL_ZCOPY_COUNT |
                      UCT_IFACE_ATTR_FIELD_TX_TOKEN_LENGTH |
                      UCT_IFACE_ATTR_FIELD_RX_TOKEN_LENGTH;
    status = uct_iface_query_v2(a->iface, &attr);
    uct_test_check((status == UCS_OK) && (attr.cap.flags == 0) &&
                   (attr.max_put_sgl_zcopy_count == 0) &&
                   (attr.tx_token_length == 0) && (attr.rx_token_length == 0),
                   "iface_query_v2: no SGL put, no tokens (%s)",
                   ucs_status_string(status));

    attr.field_mask = UCT_IFACE_ATTR_FIELD_TX_TOKEN;
    uct_test_check(uct_iface_query_v2(a->iface, &attr) ==
                   UCS_ERR_INVALID_PARAM,
                   "iface_query_v2: a token without its pair refused");
}
#endif


int main(int argc, char **argv)
{
    uct_test_node_t a, b;
    uct_test_wire_t wa, wb;

    if (argc != 3) {
        fprintf(stderr, "usage: %s DEV_A DEV_B\n", argv[0]);
        return UCT_TEST_EXIT_SETUP;
    }

    uct_test_init(argv[0], 60.0);
    uct_test_node_open(&a, argv[1], 65536);
    uct_test_node_open(&b, argv[2], 65536);
    uct_test_node_connect_pair(&a, &b, &wa, &wb);

    check_md_attr(&a);
#if UCT_RC_GDR_HAVE_V2_API
    check_md_attr_v2(&a);
    check_reachable_v2(&a, &wb);
    check_is_connected(&a, &wa, &wb, argv[2]);
    check_rkey_compare(&a, &b, &wb);
    check_connect_v2(argv[1], argv[2]);
#else
    printf("SKIP md query v2, is_reachable v2, ep_is_connected, "
           "rkey_compare, connect_to_ep v2: not in this UCX release\n");
#endif
#if UCT_RC_GDR_HAVE_IFACE_QUERY_V2
    check_iface_query_v2(&a);
#else
    printf("SKIP iface_query_v2: not in this UCX release\n");
#endif

    uct_test_node_close(&a);
    uct_test_node_close(&b);
    return uct_test_summary();
}

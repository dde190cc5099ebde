/*
 * rc_gdr: the UCT component and the rc_gdr transport, and their
 * registration when the module is loaded.
 *
 * UCX up to 1.21 loads only the modules named at its build, so the module
 * is brought in with LD_PRELOAD (contrib/env.sh) and registers itself from
 * its constructor; UCX >= 1.22 dlopens it from UCX_PLUGIN_PATH and the same
 * constructor runs. Registration is refused when the UCX in the process is
 * not the release the module was built against: its internal structures
 * would not match.
 */

#include "rc_gdr_md.h"
#include "rc_gdr_iface.h"

#include <ucs/debug/log.h>


/* The component itself is the glue's (rc_gdr_glue_v*.c): its layout is the
 * release's. */


UCT_TL_DEFINE_ENTRY(&uct_rc_gdr_component, rc_gdr,
                    uct_rc_gdr_iface_query_devices, uct_rc_gdr_iface_t,
                    UCT_RC_GDR_CONFIG_PREFIX, uct_rc_gdr_iface_config_table,
                    uct_rc_gdr_iface_config_t);


static int uct_rc_gdr_registered;


UCS_STATIC_INIT
{
    uct_rc_gdr_ucx_version_t running;
    char reason[256];
    ucs_status_t status;

    /* Before anything touches a UCX structure: in a process of another
     * release, their layouts are not this build's. */
    status = uct_rc_gdr_glue_running_version(&running);
    if (status != UCS_OK) {
        uct_rc_gdr_glue_refuse("rc_gdr: cannot tell which UCX this process "
                               "runs (no ucp_get_version); the transport is "
                               "not registered");
        return;
    }

    if (uct_rc_gdr_glue_version_check(&running, reason, sizeof(reason)) !=
        UCS_OK) {
        uct_rc_gdr_glue_refuse(reason);
        return;
    }

    uct_component_register(&uct_rc_gdr_component);
    uct_tl_register(&uct_rc_gdr_component, &UCT_TL_NAME(rc_gdr));
    uct_rc_gdr_registered = 1;
}


UCS_STATIC_CLEANUP
{
    if (uct_rc_gdr_registered) {
        uct_tl_unregister(&UCT_TL_NAME(rc_gdr));
        uct_component_unregister(&uct_rc_gdr_component);
    }
}

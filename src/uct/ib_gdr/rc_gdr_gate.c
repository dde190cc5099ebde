/**
 * rc_gdr: the GDR capability chain (doc/DESIGN.md section 1).
 *
 * The chain, in order: GPU attribute, NIC port, a working registration
 * mechanism, PCIe distance, direction policy. Every step adds an evidence
 * record; the first failing step is the one the "why" line names, because
 * fixing a later step cannot help while an earlier one fails.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "rc_gdr_gate.h"

#include <ucs/debug/log.h>
#include <ucs/sys/string.h>

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>


#define UCT_RC_GDR_KNOB_PREFIX  "UCX_RC_GDR_"


static const char *uct_rc_gdr_gate_dir_names[] = {
    [UCT_RC_GDR_DIR_NIC_READS_GPU]  = "NIC-reads-GPU",
    [UCT_RC_GDR_DIR_NIC_WRITES_GPU] = "NIC-writes-GPU"
};

/* Keys in check names and JSON */
static const char *uct_rc_gdr_gate_policy_checks[] = {
    [UCT_RC_GDR_DIR_NIC_READS_GPU]  = "policy.nic_reads_gpu",
    [UCT_RC_GDR_DIR_NIC_WRITES_GPU] = "policy.nic_writes_gpu"
};

static const char *uct_rc_gdr_gate_policy_knobs[] = {
    [UCT_RC_GDR_DIR_NIC_READS_GPU]  = UCT_RC_GDR_KNOB_NIC_READS_GPU,
    [UCT_RC_GDR_DIR_NIC_WRITES_GPU] = UCT_RC_GDR_KNOB_NIC_WRITES_GPU
};

static const char *uct_rc_gdr_gate_policy_names[] = {
    [UCT_RC_GDR_POLICY_AUTO] = "auto",
    [UCT_RC_GDR_POLICY_YES]  = "yes",
    [UCT_RC_GDR_POLICY_NO]   = "no"
};

static const char *uct_rc_gdr_gate_method_names[] = {
    [UCT_RC_GDR_REG_DMABUF]  = "dmabuf",
    [UCT_RC_GDR_REG_PEERMEM] = "peermem"
};

static const char *uct_rc_gdr_gate_lane_names[] = {
    [UCT_RC_GDR_LANE_GDR_DMABUF]  = "GDR_DMABUF",
    [UCT_RC_GDR_LANE_GDR_PEERMEM] = "GDR_PEERMEM",
    [UCT_RC_GDR_LANE_BOUNCE]      = "BOUNCE",
    [UCT_RC_GDR_LANE_REFUSED]     = "REFUSED"
};

static const char *uct_rc_gdr_gate_verdict_names[] = {
    [UCT_RC_GDR_VERDICT_PASS] = "pass",
    [UCT_RC_GDR_VERDICT_FAIL] = "fail",
    [UCT_RC_GDR_VERDICT_WARN] = "warn",
    [UCT_RC_GDR_VERDICT_INFO] = "info"
};


const char *uct_rc_gdr_gate_lane_name(uct_rc_gdr_lane_t lane)
{
    return (lane < UCT_RC_GDR_LANE_LAST) ? uct_rc_gdr_gate_lane_names[lane] :
                                           "invalid";
}

const char *uct_rc_gdr_gate_dir_name(uct_rc_gdr_dir_t dir)
{
    return (dir < UCT_RC_GDR_DIR_LAST) ? uct_rc_gdr_gate_dir_names[dir] :
                                         "invalid";
}

const char *uct_rc_gdr_gate_verdict_name(uct_rc_gdr_verdict_t verdict)
{
    return (verdict <= UCT_RC_GDR_VERDICT_INFO) ?
                   uct_rc_gdr_gate_verdict_names[verdict] :
                   "invalid";
}

/* The errno values verbs registration calls actually return */
static const char *uct_rc_gdr_gate_errno_name(int err, char *buf, size_t max)
{
    static const struct {
        int        err;
        const char *name;
    } names[] = {
        {EBADF, "EBADF"},   {EOPNOTSUPP, "EOPNOTSUPP"}, {EFAULT, "EFAULT"},
        {EINVAL, "EINVAL"}, {EPERM, "EPERM"},           {EACCES, "EACCES"},
        {ENOMEM, "ENOMEM"}, {ENODEV, "ENODEV"},         {ENOSYS, "ENOSYS"},
        {ENOENT, "ENOENT"}, {EIO, "EIO"},               {EAGAIN, "EAGAIN"},
        {ENXIO, "ENXIO"},   {EPROTONOSUPPORT, "EPROTONOSUPPORT"}
    };
    size_t i;

    for (i = 0; i < ucs_static_array_size(names); ++i) {
        if (names[i].err == err) {
            return names[i].name;
        }
    }

    snprintf(buf, max, "errno %d", err);
    return buf;
}

/* -------------------------------------------------------------------------
 * Configuration
 */

void uct_rc_gdr_gate_config_init(uct_rc_gdr_gate_config_t *config)
{
    memset(config, 0, sizeof(*config));
    config->max_distance                           = UCT_RC_GDR_DIST_PXB;
    config->policy[UCT_RC_GDR_DIR_NIC_READS_GPU]   = UCT_RC_GDR_POLICY_AUTO;
    config->policy[UCT_RC_GDR_DIR_NIC_WRITES_GPU]  = UCT_RC_GDR_POLICY_AUTO;
    config->num_methods                            = 2;
    config->methods[0]                             = UCT_RC_GDR_REG_DMABUF;
    config->methods[1]                             = UCT_RC_GDR_REG_PEERMEM;
    config->bounce                                 = 1;
    config->require                                = UCT_RC_GDR_REQUIRE_NO;
}

/* 1 yes, 0 no, -1 neither */
static int uct_rc_gdr_gate_parse_bool(const char *value)
{
    static const char *yes[] = {"yes", "y", "on", "1"};
    static const char *no[]  = {"no", "n", "off", "0"};
    size_t i;

    for (i = 0; i < ucs_static_array_size(yes); ++i) {
        if (!strcasecmp(value, yes[i])) {
            return 1;
        } else if (!strcasecmp(value, no[i])) {
            return 0;
        }
    }

    return -1;
}

static ucs_status_t
uct_rc_gdr_gate_set_distance(uct_rc_gdr_gate_config_t *config,
                             const char *knob, const char *value)
{
    if (uct_rc_gdr_topo_dist_parse(value, &config->max_distance) != UCS_OK) {
        ucs_error("invalid value '%s' for %s: allowed values are LOC, PIX, "
                  "PXB, PHB, NODE, SYS (case-insensitive)", value, knob);
        return UCS_ERR_INVALID_PARAM;
    }

    return UCS_OK;
}

static ucs_status_t uct_rc_gdr_gate_set_policy(uct_rc_gdr_policy_t *policy_p,
                                               const char *knob,
                                               const char *value)
{
    int yes;

    if (!strcasecmp(value, "auto")) {
        *policy_p = UCT_RC_GDR_POLICY_AUTO;
        return UCS_OK;
    }

    yes = uct_rc_gdr_gate_parse_bool(value);
    if (yes < 0) {
        ucs_error("invalid value '%s' for %s: allowed values are auto, yes, "
                  "no", value, knob);
        return UCS_ERR_INVALID_PARAM;
    }

    *policy_p = yes ? UCT_RC_GDR_POLICY_YES : UCT_RC_GDR_POLICY_NO;
    return UCS_OK;
}

static ucs_status_t
uct_rc_gdr_gate_set_methods(uct_rc_gdr_gate_config_t *config,
                            const char *knob, const char *value)
{
    uct_rc_gdr_reg_method_t methods[UCT_RC_GDR_REG_LAST];
    unsigned num_methods = 0;
    char item[32];
    const char *p, *end;
    size_t len;
    unsigned i, m;

    for (p = value;; p = end + 1) {
        end = strchr(p, ',');
        if (end == NULL) {
            end = p + strlen(p);
        }

        /* Trim blanks around the item */
        while ((p < end) && isspace((unsigned char)*p)) {
            ++p;
        }
        for (len = end - p; (len > 0) && isspace((unsigned char)p[len - 1]);
             --len) {
        }
        snprintf(item, sizeof(item), "%.*s", (int)len, p);

        for (m = 0; m < UCT_RC_GDR_REG_LAST; ++m) {
            if ((len == strlen(uct_rc_gdr_gate_method_names[m])) &&
                !strncasecmp(p, uct_rc_gdr_gate_method_names[m], len)) {
                break;
            }
        }

        for (i = 0; (m < UCT_RC_GDR_REG_LAST) && (i < num_methods); ++i) {
            if (methods[i] == m) {
                ucs_error("invalid value '%s' for %s: '%s' is listed twice; "
                          "allowed is a comma-separated list of dmabuf, "
                          "peermem", value, knob, item);
                return UCS_ERR_INVALID_PARAM;
            }
        }

        if (m == UCT_RC_GDR_REG_LAST) {
            ucs_error("invalid value '%s' for %s: '%s' is not a method; "
                      "allowed is a comma-separated list of dmabuf, peermem",
                      value, knob, item);
            return UCS_ERR_INVALID_PARAM;
        }

        methods[num_methods++] = m;
        if (*end == '\0') {
            break;
        }
    }

    memcpy(config->methods, methods, sizeof(methods[0]) * num_methods);
    config->num_methods = num_methods;
    return UCS_OK;
}

static ucs_status_t uct_rc_gdr_gate_set_bounce(uct_rc_gdr_gate_config_t *config,
                                               const char *knob,
                                               const char *value)
{
    int yes = uct_rc_gdr_gate_parse_bool(value);

    if (yes < 0) {
        ucs_error("invalid value '%s' for %s: allowed values are yes, no",
                  value, knob);
        return UCS_ERR_INVALID_PARAM;
    }

    config->bounce = yes;
    return UCS_OK;
}

static ucs_status_t
uct_rc_gdr_gate_set_require(uct_rc_gdr_gate_config_t *config,
                            const char *knob, const char *value)
{
    if (!strcasecmp(value, "gdr")) {
        config->require = UCT_RC_GDR_REQUIRE_GDR;
    } else if (uct_rc_gdr_gate_parse_bool(value) == 0) {
        config->require = UCT_RC_GDR_REQUIRE_NO;
    } else {
        /* "yes" is refused on purpose: require what, exactly? */
        ucs_error("invalid value '%s' for %s: allowed values are no, gdr",
                  value, knob);
        return UCS_ERR_INVALID_PARAM;
    }

    return UCS_OK;
}

ucs_status_t uct_rc_gdr_gate_config_set(uct_rc_gdr_gate_config_t *config,
                                        const char *name, const char *value)
{
    uct_rc_gdr_gate_config_t copy = *config;
    const char *short_name        = name;
    char knob[64];
    ucs_status_t status;

    if (!strncasecmp(short_name, "UCX_", 4)) {
        short_name += 4;
    }
    if (!strncasecmp(short_name, "RC_GDR_", 7)) {
        short_name += 7;
    }
    snprintf(knob, sizeof(knob), UCT_RC_GDR_KNOB_PREFIX "%s", short_name);

    if (value == NULL) {
        ucs_error("no value given for %s", knob);
        return UCS_ERR_INVALID_PARAM;
    }

    if (!strcasecmp(short_name, "MAX_DISTANCE")) {
        status = uct_rc_gdr_gate_set_distance(&copy, knob, value);
    } else if (!strcasecmp(short_name, "NIC_READS_GPU")) {
        status = uct_rc_gdr_gate_set_policy(
                &copy.policy[UCT_RC_GDR_DIR_NIC_READS_GPU], knob, value);
    } else if (!strcasecmp(short_name, "NIC_WRITES_GPU")) {
        status = uct_rc_gdr_gate_set_policy(
                &copy.policy[UCT_RC_GDR_DIR_NIC_WRITES_GPU], knob, value);
    } else if (!strcasecmp(short_name, "REG_METHODS")) {
        status = uct_rc_gdr_gate_set_methods(&copy, knob, value);
    } else if (!strcasecmp(short_name, "BOUNCE")) {
        status = uct_rc_gdr_gate_set_bounce(&copy, knob, value);
    } else if (!strcasecmp(short_name, "REQUIRE")) {
        status = uct_rc_gdr_gate_set_require(&copy, knob, value);
    } else {
        ucs_error("unknown rc_gdr gate setting '%s': known are MAX_DISTANCE, "
                  "NIC_READS_GPU, NIC_WRITES_GPU, REG_METHODS, BOUNCE, "
                  "REQUIRE", name);
        return UCS_ERR_NO_ELEM;
    }

    if (status == UCS_OK) {
        *config = copy;
    }
    return status;
}

ucs_status_t uct_rc_gdr_gate_config_read_env(uct_rc_gdr_gate_config_t *config)
{
    static const char *knobs[] = {
        UCT_RC_GDR_KNOB_MAX_DISTANCE, UCT_RC_GDR_KNOB_NIC_READS_GPU,
        UCT_RC_GDR_KNOB_NIC_WRITES_GPU, UCT_RC_GDR_KNOB_REG_METHODS,
        UCT_RC_GDR_KNOB_BOUNCE, UCT_RC_GDR_KNOB_REQUIRE
    };
    const char *value;
    ucs_status_t status;
    size_t i;

    for (i = 0; i < ucs_static_array_size(knobs); ++i) {
        value = getenv(knobs[i]);
        if (value == NULL) {
            continue;
        }

        status = uct_rc_gdr_gate_config_set(config, knobs[i], value);
        if (status != UCS_OK) {
            return status;
        }
    }

    return UCS_OK;
}

/* -------------------------------------------------------------------------
 * Evaluation
 */

static void UCS_F_PRINTF(3, 4)
uct_rc_gdr_gate_append(char *buf, size_t max, const char *fmt, ...)
{
    size_t len = strlen(buf);
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf + len, max - len, fmt, ap);
    va_end(ap);
}

static int UCS_F_PRINTF(7, 8)
uct_rc_gdr_gate_add(uct_rc_gdr_gate_result_t *result, const char *check,
                    uct_rc_gdr_verdict_t verdict, const char *knob,
                    const char *hint, const char *source, const char *fmt, ...)
{
    uct_rc_gdr_evidence_t *ev;
    va_list ap;

    /* The route is bounded, so this only trips if a check is added */
    if (result->num_evidence == UCT_RC_GDR_GATE_MAX_EVIDENCE) {
        ucs_debug("rc_gdr gate: evidence '%s' dropped: list full", check);
        return -1;
    }

    ev          = &result->evidence[result->num_evidence];
    ev->check   = check;
    ev->verdict = verdict;
    ev->knob    = knob;
    ev->hint    = hint;
    ucs_strncpy_safe(ev->source, source, sizeof(ev->source));
    va_start(ap, fmt);
    vsnprintf(ev->value, sizeof(ev->value), fmt, ap);
    va_end(ap);
    return result->num_evidence++;
}

/* A chain step: remember the first one that failed */
static void uct_rc_gdr_gate_step(const uct_rc_gdr_gate_result_t *result,
                                 int index, int *fail_p)
{
    if ((index >= 0) && (*fail_p < 0) &&
        (result->evidence[index].verdict == UCT_RC_GDR_VERDICT_FAIL)) {
        *fail_p = index;
    }
}

static void uct_rc_gdr_gate_check_gpu(uct_rc_gdr_gate_result_t *result,
                                      const uct_rc_gdr_gate_gpu_t *gpu,
                                      int *fail_p)
{
    static const char *source =
            "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_"
            "SUPPORTED)";
    int index;

    if (gpu->gdr_supported == 1) {
        index = uct_rc_gdr_gate_add(result, "gpu.gdr_attribute",
                                    UCT_RC_GDR_VERDICT_PASS, NULL, NULL,
                                    source, "1");
    } else if (gpu->gdr_supported == 0) {
        index = uct_rc_gdr_gate_add(result, "gpu.gdr_attribute",
                                    UCT_RC_GDR_VERDICT_FAIL, NULL,
                                    "this GPU or its driver does not offer "
                                    "GPUDirect RDMA",
                                    source, "0");
    } else {
        index = uct_rc_gdr_gate_add(result, "gpu.gdr_attribute",
                                    UCT_RC_GDR_VERDICT_FAIL, NULL,
                                    "the CUDA driver must be loadable "
                                    "(libcuda.so.1) and see the GPU",
                                    source, "unknown: %s",
                                    (gpu->query_error != NULL) ?
                                            gpu->query_error :
                                            "attribute not read");
    }

    uct_rc_gdr_gate_step(result, index, fail_p);
}

static void uct_rc_gdr_gate_check_port(uct_rc_gdr_gate_result_t *result,
                                       const uct_rc_gdr_gate_nic_t *nic,
                                       int *fail_p)
{
    static const char *hint = "bring the port up (ibv_devinfo shows its "
                              "state) or select another device";
    const char *state       = nic->port_state;
    char source[UCT_RC_GDR_GATE_SOURCE_MAX];
    int index;

    snprintf(source, sizeof(source), "ibv_query_port(%s, %u)", nic->name,
             nic->port_num);
    if (nic->port_active == 1) {
        index = uct_rc_gdr_gate_add(result, "nic.port_state",
                                    UCT_RC_GDR_VERDICT_PASS, NULL, NULL,
                                    source, "%s",
                                    (state != NULL) ? state : "ACTIVE");
    } else {
        index = uct_rc_gdr_gate_add(result, "nic.port_state",
                                    UCT_RC_GDR_VERDICT_FAIL, "UCX_NET_DEVICES",
                                    hint, source, "%s%s",
                                    (nic->port_active < 0) ? "unknown: " : "",
                                    (state != NULL) ? state : "not active");
    }

    uct_rc_gdr_gate_step(result, index, fail_p);
}

static int
uct_rc_gdr_gate_method_enabled(const uct_rc_gdr_gate_config_t *config,
                               uct_rc_gdr_reg_method_t method)
{
    unsigned i;

    for (i = 0; i < config->num_methods; ++i) {
        if (config->methods[i] == method) {
            return 1;
        }
    }

    return 0;
}

/* DMA-BUF: the GPU exports, and the verbs provider imports */
static int uct_rc_gdr_gate_check_dmabuf(uct_rc_gdr_gate_result_t *result,
                                        const uct_rc_gdr_gate_gpu_t *gpu,
                                        const uct_rc_gdr_gate_nic_t *nic,
                                        int enabled, char *why, size_t max)
{
    int err      = nic->dmabuf_errno;
    int nic_ok   = (err == 0) || (err == EBADF);
    char source[UCT_RC_GDR_GATE_SOURCE_MAX];
    char errbuf[16];
    const char *errname;

    uct_rc_gdr_gate_add(result, "gpu.dmabuf_attribute",
                        !enabled ? UCT_RC_GDR_VERDICT_INFO :
                        (gpu->dmabuf_supported == 1) ?
                                   UCT_RC_GDR_VERDICT_PASS :
                                   UCT_RC_GDR_VERDICT_FAIL,
                        NULL, NULL,
                        "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_DMA_BUF_"
                        "SUPPORTED)",
                        "%s", (gpu->dmabuf_supported == 1) ? "1" :
                              (gpu->dmabuf_supported == 0) ? "0" : "unknown");

    errname = (err == UCT_RC_GDR_GATE_NOT_PROBED) ?
                      "not probed" :
                      uct_rc_gdr_gate_errno_name(err, errbuf, sizeof(errbuf));
    snprintf(source, sizeof(source), "ibv_reg_dmabuf_mr(%s, fd=-1) probe",
             nic->name);
    uct_rc_gdr_gate_add(result, "nic.dmabuf_probe",
                        !enabled ? UCT_RC_GDR_VERDICT_INFO :
                        nic_ok   ? UCT_RC_GDR_VERDICT_PASS :
                                   UCT_RC_GDR_VERDICT_FAIL,
                        NULL, NULL, source, "%s%s",
                        (err == 0) ? "accepted" : errname,
                        (err == EBADF)      ? " (fd checked: supported)" :
                        (err == EOPNOTSUPP) ? " (not supported)" :
                                              "");

    if (!enabled) {
        snprintf(why, max, "disabled");
    } else if (gpu->dmabuf_supported != 1) {
        snprintf(why, max, "GPU attribute %s",
                 (gpu->dmabuf_supported == 0) ? "0" : "unknown");
    } else if (!nic_ok) {
        snprintf(why, max, "%s", errname);
    }

    return enabled && (gpu->dmabuf_supported == 1) && nic_ok;
}

/* peermem: only a real registration proves it; loaded modules are a hint */
static int uct_rc_gdr_gate_check_peermem(uct_rc_gdr_gate_result_t *result,
                                         const uct_rc_gdr_gate_nic_t *nic,
                                         int enabled, char *why, size_t max)
{
    int err = nic->peermem_errno;
    char source[UCT_RC_GDR_GATE_SOURCE_MAX];
    char errbuf[16];
    const char *errname;

    errname = (err == 0)                          ? "ok" :
              (err == UCT_RC_GDR_GATE_NOT_PROBED) ? "not tested" :
              uct_rc_gdr_gate_errno_name(err, errbuf, sizeof(errbuf));
    snprintf(source, sizeof(source), "ibv_reg_mr(%s, GPU buffer) test",
             nic->name);
    uct_rc_gdr_gate_add(result, "nic.peermem_registration",
                        !enabled    ? UCT_RC_GDR_VERDICT_INFO :
                        (err == 0)  ? UCT_RC_GDR_VERDICT_PASS :
                                      UCT_RC_GDR_VERDICT_FAIL,
                        NULL, NULL, source, "%s", errname);

    source[0] = '\0';
    if (nic->peermem_source != NULL) {
        ucs_strncpy_safe(source, nic->peermem_source, sizeof(source));
    }
    if (nic->peermem_modules == 1) {
        /* Loaded but not registered with the peer-memory core happens */
        uct_rc_gdr_gate_add(result, "nic.peermem_modules",
                            (err == 0) ? UCT_RC_GDR_VERDICT_PASS :
                                         UCT_RC_GDR_VERDICT_WARN,
                            NULL,
                            (err == 0) ? NULL :
                                         "modules are loaded but a real "
                                         "registration failed: check "
                                         "/sys/kernel/mm/memory_peers and "
                                         "dmesg",
                            source, "%s",
                            (err == 0) ? "present" :
                                         "present, registration did not work");
    } else {
        uct_rc_gdr_gate_add(result, "nic.peermem_modules",
                            UCT_RC_GDR_VERDICT_INFO, NULL, NULL, source, "%s",
                            (nic->peermem_modules == 0) ? "absent" :
                                                          "not looked for");
    }

    if (!enabled) {
        snprintf(why, max, "disabled");
    } else if (err != 0) {
        snprintf(why, max, "%s", errname);
    }

    return enabled && (err == 0);
}

static uct_rc_gdr_lane_t
uct_rc_gdr_gate_check_reg(uct_rc_gdr_gate_result_t *result,
                          const uct_rc_gdr_gate_gpu_t *gpu,
                          const uct_rc_gdr_gate_nic_t *nic,
                          const uct_rc_gdr_gate_config_t *config, int *fail_p)
{
    static const uct_rc_gdr_lane_t lanes[] = {
        [UCT_RC_GDR_REG_DMABUF]  = UCT_RC_GDR_LANE_GDR_DMABUF,
        [UCT_RC_GDR_REG_PEERMEM] = UCT_RC_GDR_LANE_GDR_PEERMEM
    };
    char why[UCT_RC_GDR_REG_LAST][32] = {"", ""};
    char value[UCT_RC_GDR_GATE_VALUE_MAX];
    int works[UCT_RC_GDR_REG_LAST];
    unsigned i, m;
    int index;

    works[UCT_RC_GDR_REG_DMABUF] = uct_rc_gdr_gate_check_dmabuf(
            result, gpu, nic,
            uct_rc_gdr_gate_method_enabled(config, UCT_RC_GDR_REG_DMABUF),
            why[UCT_RC_GDR_REG_DMABUF], sizeof(why[0]));
    works[UCT_RC_GDR_REG_PEERMEM] = uct_rc_gdr_gate_check_peermem(
            result, nic,
            uct_rc_gdr_gate_method_enabled(config, UCT_RC_GDR_REG_PEERMEM),
            why[UCT_RC_GDR_REG_PEERMEM], sizeof(why[0]));

    for (i = 0; i < config->num_methods; ++i) {
        m = config->methods[i];
        if (works[m]) {
            index = uct_rc_gdr_gate_add(result, "registration.mechanism",
                                        UCT_RC_GDR_VERDICT_PASS,
                                        UCT_RC_GDR_KNOB_REG_METHODS, NULL,
                                        "the registration tests above, in "
                                        "configured order",
                                        "%s", uct_rc_gdr_gate_method_names[m]);
            uct_rc_gdr_gate_step(result, index, fail_p);
            return lanes[m];
        }
    }

    /* Configured methods first, in their order, then the disabled ones */
    value[0] = '\0';
    for (i = 0; i < config->num_methods; ++i) {
        m = config->methods[i];
        uct_rc_gdr_gate_append(value, sizeof(value), "%s%s: %s",
                               (i > 0) ? ", " : "",
                               uct_rc_gdr_gate_method_names[m], why[m]);
    }
    for (m = 0; m < UCT_RC_GDR_REG_LAST; ++m) {
        if (!uct_rc_gdr_gate_method_enabled(config, m)) {
            uct_rc_gdr_gate_append(value, sizeof(value), ", %s: disabled",
                                   uct_rc_gdr_gate_method_names[m]);
        }
    }

    index = uct_rc_gdr_gate_add(result, "registration.mechanism",
                                UCT_RC_GDR_VERDICT_FAIL,
                                UCT_RC_GDR_KNOB_REG_METHODS,
                                "check nvidia_peermem / DMA-BUF support",
                                "the registration tests above, in configured "
                                "order",
                                "none (%s)", value);
    uct_rc_gdr_gate_step(result, index, fail_p);
    return UCT_RC_GDR_LANE_BOUNCE;
}

static void uct_rc_gdr_gate_check_acs(uct_rc_gdr_gate_result_t *result,
                                      const uct_rc_gdr_topo_t *topo)
{
    unsigned count[UCT_RC_GDR_ACS_REDIRECT + 1] = {0};
    const uct_rc_gdr_topo_bridge_t *bridge;
    char source[UCT_RC_GDR_GATE_SOURCE_MAX];
    unsigned i;

    for (i = 0; i < topo->num_route; ++i) {
        bridge = &topo->route[i];
        ++count[bridge->acs];
        if (bridge->acs != UCT_RC_GDR_ACS_REDIRECT) {
            continue;
        }

        snprintf(source, sizeof(source),
                 "%s/bus/pci/devices/%s/config, ACS control at 0x%x",
                 topo->sysfs_root, bridge->bdf,
                 bridge->acs_offset + UCT_RC_GDR_PCI_ACS_CTRL);
        uct_rc_gdr_gate_add(result, "topo.acs", UCT_RC_GDR_VERDICT_WARN, NULL,
                            "ACS redirect sends peer-to-peer traffic through "
                            "the root complex (slow, often breaks GDR): "
                            "disable it on the path (setpci, BIOS)",
                            source, "%s ctrl=0x%04x: P2P %s%s%s redirect",
                            bridge->bdf, bridge->acs_ctrl,
                            (bridge->acs_ctrl & UCT_RC_GDR_PCI_ACS_CTRL_RR) ?
                                    "request" : "",
                            ((bridge->acs_ctrl & UCT_RC_GDR_PCI_ACS_CTRL_RR) &&
                             (bridge->acs_ctrl & UCT_RC_GDR_PCI_ACS_CTRL_CR)) ?
                                    " and " : "",
                            (bridge->acs_ctrl & UCT_RC_GDR_PCI_ACS_CTRL_CR) ?
                                    "completion" : "");
    }

    if (topo->num_route == 0) {
        return;
    }

    snprintf(source, sizeof(source), "%s/bus/pci/devices/*/config",
             topo->sysfs_root);
    uct_rc_gdr_gate_add(result, "topo.acs_summary",
                        count[UCT_RC_GDR_ACS_REDIRECT] ?
                                UCT_RC_GDR_VERDICT_WARN :
                        count[UCT_RC_GDR_ACS_UNREADABLE] ?
                                UCT_RC_GDR_VERDICT_INFO :
                                UCT_RC_GDR_VERDICT_PASS,
                        NULL,
                        count[UCT_RC_GDR_ACS_UNREADABLE] ?
                                "reading ACS needs root (config space past "
                                "64 bytes)" : NULL,
                        source,
                        "%u bridges: %u redirect, %u no redirect, %u without "
                        "ACS, %u unreadable",
                        topo->num_route, count[UCT_RC_GDR_ACS_REDIRECT],
                        count[UCT_RC_GDR_ACS_NO_REDIRECT],
                        count[UCT_RC_GDR_ACS_ABSENT],
                        count[UCT_RC_GDR_ACS_UNREADABLE]);
}

static void uct_rc_gdr_gate_check_iommu(uct_rc_gdr_gate_result_t *result,
                                        const uct_rc_gdr_topo_t *topo)
{
    int translated = (topo->gpu.iommu == UCT_RC_GDR_IOMMU_TRANSLATED) ||
                     (topo->nic.iommu == UCT_RC_GDR_IOMMU_TRANSLATED);
    char source[UCT_RC_GDR_GATE_SOURCE_MAX];

    snprintf(source, sizeof(source),
             "%s/class/iommu and the devices' iommu_group/type",
             topo->sysfs_root);
    uct_rc_gdr_gate_add(result, "topo.iommu",
                        translated ? UCT_RC_GDR_VERDICT_WARN :
                                     UCT_RC_GDR_VERDICT_INFO,
                        NULL,
                        translated ? "a translating IOMMU can block or slow "
                                     "peer-to-peer DMA; GDR setups usually "
                                     "use iommu=pt" : NULL,
                        source, "GPU: %s%s%s%s, NIC: %s%s%s%s",
                        uct_rc_gdr_topo_iommu_name(topo->gpu.iommu),
                        topo->gpu.iommu_type[0] ? " [" : "",
                        topo->gpu.iommu_type,
                        topo->gpu.iommu_type[0] ? "]" : "",
                        uct_rc_gdr_topo_iommu_name(topo->nic.iommu),
                        topo->nic.iommu_type[0] ? " [" : "",
                        topo->nic.iommu_type,
                        topo->nic.iommu_type[0] ? "]" : "");
}

static void uct_rc_gdr_gate_check_topo(uct_rc_gdr_gate_result_t *result,
                                       const uct_rc_gdr_gate_gpu_t *gpu,
                                       const uct_rc_gdr_topo_t *topo,
                                       const uct_rc_gdr_gate_config_t *config,
                                       int *fail_p)
{
    const char *max = uct_rc_gdr_topo_dist_name(config->max_distance);
    char source[UCT_RC_GDR_GATE_SOURCE_MAX];
    int index, close;

    if (topo == NULL) {
        result->dist = UCT_RC_GDR_DIST_UNKNOWN;
        index = uct_rc_gdr_gate_add(result, "topo.distance",
                                    UCT_RC_GDR_VERDICT_FAIL, NULL,
                                    "the PCIe distance must be known",
                                    "none", "unknown: topology not examined");
        uct_rc_gdr_gate_step(result, index, fail_p);
        return;
    }

    result->dist = topo->dist;
    snprintf(source, sizeof(source), "%s/bus/pci/devices, class/infiniband/"
             "%s/device", topo->sysfs_root, topo->nic_name);
    if (gpu->emulated && !gpu->placed) {
        /* Emulated GPU memory is host memory: no PCIe peer-to-peer path is
         * involved, whatever the NIC. Real GPUs, and emulated ones placed at
         * a PCI function, never get here. */
        uct_rc_gdr_gate_add(result, "topo.distance", UCT_RC_GDR_VERDICT_PASS,
                            NULL, NULL, "the stand-in CUDA driver",
                            "not applicable: EMULATED GPU (host memory); "
                            "sysfs says: %s", topo->reason);
        return;
    }

    if (topo->dist == UCT_RC_GDR_DIST_UNKNOWN) {
        /* No level makes an unknown distance close enough */
        index = uct_rc_gdr_gate_add(result, "topo.distance",
                                    UCT_RC_GDR_VERDICT_FAIL, NULL,
                                    (topo->outcome ==
                                     UCT_RC_GDR_TOPO_VIRTUAL_NIC) ?
                                            "a NIC without a PCI function "
                                            "cannot DMA into GPU memory" :
                                            "check the PCI addresses and "
                                            "sysfs",
                                    source, "unknown: %s", topo->reason);
        uct_rc_gdr_gate_step(result, index, fail_p);
        return;
    }

    close = (topo->dist <= config->max_distance);
    index = uct_rc_gdr_gate_add(result, "topo.distance",
                                close ? UCT_RC_GDR_VERDICT_PASS :
                                        UCT_RC_GDR_VERDICT_FAIL,
                                UCT_RC_GDR_KNOB_MAX_DISTANCE,
                                close ? NULL :
                                        "the NIC is farther from the GPU "
                                        "than allowed: use a closer NIC or "
                                        "raise the level",
                                source, "%s (max %s)",
                                uct_rc_gdr_topo_dist_name(topo->dist), max);
    uct_rc_gdr_gate_step(result, index, fail_p);

    snprintf(source, sizeof(source), "sysfs paths of %s and %s",
             topo->gpu.bdf, topo->nic.bdf);
    uct_rc_gdr_gate_add(result, "topo.route", UCT_RC_GDR_VERDICT_INFO, NULL,
                        NULL, source, "%s", topo->reason);

    snprintf(source, sizeof(source), "%s/bus/pci/devices/*/numa_node",
             topo->sysfs_root);
    uct_rc_gdr_gate_add(result, "topo.numa", UCT_RC_GDR_VERDICT_INFO, NULL,
                        NULL, source, "GPU node %d, NIC node %d",
                        topo->gpu.numa_node, topo->nic.numa_node);

    uct_rc_gdr_gate_check_acs(result, topo);
    uct_rc_gdr_gate_check_iommu(result, topo);
}

static ucs_status_t
uct_rc_gdr_gate_config_check(const uct_rc_gdr_gate_config_t *config)
{
    unsigned i;

    if ((config->max_distance >= UCT_RC_GDR_DIST_UNKNOWN) ||
        (config->num_methods == 0) ||
        (config->num_methods > UCT_RC_GDR_REG_LAST)) {
        return UCS_ERR_INVALID_PARAM;
    }

    for (i = 0; i < config->num_methods; ++i) {
        if (config->methods[i] >= UCT_RC_GDR_REG_LAST) {
            return UCS_ERR_INVALID_PARAM;
        }
    }

    return UCS_OK;
}

ucs_status_t uct_rc_gdr_gate_evaluate(const uct_rc_gdr_gate_gpu_t *gpu,
                                      const uct_rc_gdr_gate_nic_t *nic,
                                      const uct_rc_gdr_topo_t *topo,
                                      const uct_rc_gdr_gate_config_t *config,
                                      uct_rc_gdr_gate_result_t *result_p)
{
    uct_rc_gdr_gate_result_t *result = result_p;
    ucs_status_t status              = UCS_OK;
    int fail_chain                   = -1;
    uct_rc_gdr_lane_t gdr_lane;
    uct_rc_gdr_policy_t policy;
    uct_rc_gdr_dir_t dir;
    int index, fail, required;

    if ((gpu == NULL) || (nic == NULL) || (nic->name == NULL) ||
        (config == NULL) || (uct_rc_gdr_gate_config_check(config) != UCS_OK)) {
        ucs_error("rc_gdr gate: missing GPU/NIC facts or invalid "
                  "configuration");
        return UCS_ERR_INVALID_PARAM;
    }

    memset(result, 0, sizeof(*result));
    ucs_strncpy_safe(result->gpu, (gpu->name != NULL) ? gpu->name : "GPU?",
                     sizeof(result->gpu));
    ucs_strncpy_safe(result->gpu_bdf, (gpu->pci_bdf != NULL) ? gpu->pci_bdf :
                     "", sizeof(result->gpu_bdf));
    ucs_strncpy_safe(result->nic, nic->name, sizeof(result->nic));
    result->port_num = nic->port_num;

    /* Steps 1-4 hold for both directions */
    uct_rc_gdr_gate_check_gpu(result, gpu, &fail_chain);
    uct_rc_gdr_gate_check_port(result, nic, &fail_chain);
    gdr_lane = uct_rc_gdr_gate_check_reg(result, gpu, nic, config,
                                         &fail_chain);
    uct_rc_gdr_gate_check_topo(result, gpu, topo, config, &fail_chain);

    /* Step 5, and the lane per direction */
    for (dir = 0; dir < UCT_RC_GDR_DIR_LAST; ++dir) {
        policy = config->policy[dir];
        index  = uct_rc_gdr_gate_add(result, uct_rc_gdr_gate_policy_checks[dir],
                                     (policy == UCT_RC_GDR_POLICY_NO) ?
                                             UCT_RC_GDR_VERDICT_FAIL :
                                             UCT_RC_GDR_VERDICT_PASS,
                                     uct_rc_gdr_gate_policy_knobs[dir],
                                     (policy == UCT_RC_GDR_POLICY_NO) ?
                                             "GDR in this direction is "
                                             "turned off by configuration" :
                                             NULL,
                                     "configuration", "%s",
                                     uct_rc_gdr_gate_policy_names[policy]);
        fail   = fail_chain;
        uct_rc_gdr_gate_step(result, index, &fail);

        required = (policy == UCT_RC_GDR_POLICY_YES) ||
                   ((policy != UCT_RC_GDR_POLICY_NO) &&
                    (config->require == UCT_RC_GDR_REQUIRE_GDR));

        result->why[dir] = fail;
        if (fail < 0) {
            result->lane[dir] = gdr_lane;
        } else if (required) {
            /* A force setting turns a failed check into an error */
            result->lane[dir] = UCT_RC_GDR_LANE_REFUSED;
            snprintf(result->refused_by[dir], sizeof(result->refused_by[0]),
                     "%s=%s",
                     (policy == UCT_RC_GDR_POLICY_YES) ?
                             uct_rc_gdr_gate_policy_knobs[dir] :
                             UCT_RC_GDR_KNOB_REQUIRE,
                     (policy == UCT_RC_GDR_POLICY_YES) ? "yes" : "gdr");
            status = UCS_ERR_UNSUPPORTED;
        } else if (config->bounce) {
            result->lane[dir] = UCT_RC_GDR_LANE_BOUNCE;
        } else {
            result->lane[dir] = UCT_RC_GDR_LANE_REFUSED;
            snprintf(result->refused_by[dir], sizeof(result->refused_by[0]),
                     "%s=no", UCT_RC_GDR_KNOB_BOUNCE);
        }
    }

    uct_rc_gdr_gate_add(result, "config.require", UCT_RC_GDR_VERDICT_INFO,
                        UCT_RC_GDR_KNOB_REQUIRE, NULL, "configuration", "%s",
                        (config->require == UCT_RC_GDR_REQUIRE_GDR) ? "gdr" :
                                                                      "no");
    uct_rc_gdr_gate_add(result, "config.bounce", UCT_RC_GDR_VERDICT_INFO,
                        UCT_RC_GDR_KNOB_BOUNCE, NULL, "configuration", "%s",
                        config->bounce ? "yes" : "no");

    result->status = status;
    return status;
}

/*
 * The few NVML declarations UCX's CUDA modules compile against, written for
 * rc_gdr's CUDA build of UCX (contrib/ucx-upstream.sh --cuda): the CUDA
 * toolkit on these machines ships no nvml.h. Layouts follow NVML's
 * documented ABI, so a real libnvidia-ml.so.1 on a GPU machine answers
 * these calls correctly; UCX uses NVML only for NVLink and fabric queries.
 */

#ifndef RC_GDR_NVML_STANDIN_H_
#define RC_GDR_NVML_STANDIN_H_

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nvmlReturn_enum {
    NVML_SUCCESS                 = 0,
    NVML_ERROR_UNINITIALIZED     = 1,
    NVML_ERROR_INVALID_ARGUMENT  = 2,
    NVML_ERROR_NOT_SUPPORTED     = 3,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_UNKNOWN           = 999
} nvmlReturn_t;

typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct nvmlPciInfo_st {
    char         busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char         busId[32];
} nvmlPciInfo_t;

typedef enum nvmlValueType_enum {
    NVML_VALUE_TYPE_DOUBLE             = 0,
    NVML_VALUE_TYPE_UNSIGNED_INT       = 1,
    NVML_VALUE_TYPE_UNSIGNED_LONG      = 2,
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
    NVML_VALUE_TYPE_SIGNED_LONG_LONG   = 4,
    NVML_VALUE_TYPE_SIGNED_INT         = 5
} nvmlValueType_t;

typedef union nvmlValue_st {
    double             dVal;
    int                siVal;
    unsigned int       uiVal;
    unsigned long      ulVal;
    unsigned long long ullVal;
    signed long long   sllVal;
    unsigned short     usVal;
} nvmlValue_t;

typedef struct nvmlFieldValue_st {
    unsigned int    fieldId;
    unsigned int    scopeId;
    long long       timestamp;
    long long       latencyUsec;
    nvmlValueType_t valueType;
    nvmlReturn_t    nvmlReturn;
    nvmlValue_t     value;
} nvmlFieldValue_t;

#define NVML_FI_DEV_NVLINK_LINK_COUNT 91

nvmlReturn_t nvmlInit(void);
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
const char  *nvmlErrorString(nvmlReturn_t result);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *device_count);
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index,
                                        nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci);
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count,
                                      nvmlFieldValue_t *values);
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device,
                                              unsigned int link,
                                              nvmlPciInfo_t *pci);

#ifdef __cplusplus
}
#endif

#endif

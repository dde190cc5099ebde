/*
 * Link-time and run-time stand-in for libnvidia-ml.so.1 where no NVIDIA
 * driver is installed: every call says the driver is not loaded, which UCX
 * treats as "no NVML" (contrib/ucx-upstream.sh --cuda).
 */

#include "nvml.h"

#include <stddef.h>

#define RC_GDR_NVML_ABSENT NVML_ERROR_DRIVER_NOT_LOADED

nvmlReturn_t nvmlInit(void) { return RC_GDR_NVML_ABSENT; }
nvmlReturn_t nvmlInit_v2(void) { return RC_GDR_NVML_ABSENT; }
nvmlReturn_t nvmlShutdown(void) { return RC_GDR_NVML_ABSENT; }

const char *nvmlErrorString(nvmlReturn_t result)
{
    return (result == NVML_SUCCESS) ? "success" :
           "NVIDIA driver not loaded (rc_gdr's NVML stand-in)";
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *device_count)
{
    return RC_GDR_NVML_ABSENT;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index,
                                        nvmlDevice_t *device)
{
    return RC_GDR_NVML_ABSENT;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return RC_GDR_NVML_ABSENT;
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count,
                                      nvmlFieldValue_t *values)
{
    return RC_GDR_NVML_ABSENT;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device,
                                              unsigned int link,
                                              nvmlPciInfo_t *pci)
{
    return RC_GDR_NVML_ABSENT;
}

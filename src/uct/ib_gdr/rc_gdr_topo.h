/**
 * rc_gdr: PCIe distance between a GPU and a NIC, read from sysfs.
 *
 * The distance classes carry the meanings that nvidia-smi ("topo -m") and
 * NCCL (NCCL_NET_GDR_LEVEL) users know, from nearest to farthest:
 *
 *   LOC   the same PCI device.
 *   PIX   at most one PCIe bridge between them: both sit directly below one
 *         bridge, or below the downstream ports of one PCIe switch (a switch,
 *         upstream port plus its downstream ports, counts as one bridge).
 *   PXB   several PCIe bridges (e.g. nested switches), but the path does not
 *         go through the PCIe host bridge.
 *   PHB   the path goes through a PCIe host bridge (the CPU root complex):
 *         the devices hang below different root ports of one host bridge.
 *   NODE  different host bridges of one NUMA node: the path crosses the
 *         interconnect between host bridges inside a CPU socket.
 *   SYS   different NUMA nodes: the path crosses the inter-socket link
 *         (QPI/UPI, xGMI, ...).
 *
 * UNKNOWN means the distance could not be determined (a NIC without a PCI
 * function, such as siw or rxe on a veth, or a device missing from sysfs; rxe
 * on a NIC's netdev is placed on that NIC's function); it is never
 * "close enough" for any configured level.
 *
 * Everything is read below a sysfs root given by the caller ("/sys" in
 * production), so tests run on synthetic trees.
 */

#ifndef UCT_RC_GDR_TOPO_H_
#define UCT_RC_GDR_TOPO_H_

#include <ucs/sys/compiler_def.h>
#include <ucs/sys/topo/base/topo.h>
#include <ucs/type/status.h>

#include <stddef.h>
#include <stdint.h>

BEGIN_C_DECLS

/* "dddd:bb:dd.f"; a domain wider than 16 bits (VMD, Hyper-V) fits too */
#define UCT_RC_GDR_BDF_MAX             24
/* PCI bridges between a host bridge and a device */
#define UCT_RC_GDR_TOPO_MAX_DEPTH      16
#define UCT_RC_GDR_TOPO_REASON_MAX     256
#define UCT_RC_GDR_TOPO_ROOT_MAX       128


typedef enum {
    UCT_RC_GDR_DIST_LOC,
    UCT_RC_GDR_DIST_PIX,
    UCT_RC_GDR_DIST_PXB,
    UCT_RC_GDR_DIST_PHB,
    UCT_RC_GDR_DIST_NODE,
    UCT_RC_GDR_DIST_SYS,
    UCT_RC_GDR_DIST_UNKNOWN,
    UCT_RC_GDR_DIST_LAST
} uct_rc_gdr_dist_t;


/* How far the lookup got */
typedef enum {
    UCT_RC_GDR_TOPO_PCI,          /* both devices found on PCI, classified */
    UCT_RC_GDR_TOPO_VIRTUAL_NIC,  /* the NIC has no PCI device (rxe, siw) */
    UCT_RC_GDR_TOPO_NOT_FOUND     /* a device is missing from sysfs */
} uct_rc_gdr_topo_outcome_t;


/* ACS (Access Control Services) state of one bridge on the path */
typedef enum {
    UCT_RC_GDR_ACS_UNREADABLE,  /* extended config space hidden (not root) */
    UCT_RC_GDR_ACS_ABSENT,      /* no ACS capability on this bridge */
    UCT_RC_GDR_ACS_NO_REDIRECT, /* ACS present, peer-to-peer not redirected */
    UCT_RC_GDR_ACS_REDIRECT     /* P2P request/completion redirect enabled */
} uct_rc_gdr_acs_t;


/* IOMMU mode seen by one device */
typedef enum {
    UCT_RC_GDR_IOMMU_UNKNOWN,
    UCT_RC_GDR_IOMMU_ABSENT,     /* no IOMMU registered with the kernel */
    UCT_RC_GDR_IOMMU_IDENTITY,   /* passthrough: bus address = physical */
    UCT_RC_GDR_IOMMU_TRANSLATED, /* "DMA" / "DMA-FQ": addresses remapped */
    UCT_RC_GDR_IOMMU_OTHER       /* "blocked", "unmanaged" (VFIO), ... */
} uct_rc_gdr_iommu_t;


/* PCI Express ACS extended capability, from the PCIe base specification */
#define UCT_RC_GDR_PCI_EXT_CAP_START   0x100
#define UCT_RC_GDR_PCI_EXT_CAP_ID_ACS  0x000d
#define UCT_RC_GDR_PCI_ACS_CTRL        6       /* offset in the capability */
#define UCT_RC_GDR_PCI_ACS_CTRL_RR     (1u << 2) /* P2P request redirect */
#define UCT_RC_GDR_PCI_ACS_CTRL_CR     (1u << 3) /* P2P completion redirect */


typedef struct uct_rc_gdr_topo_bridge {
    char                      bdf[UCT_RC_GDR_BDF_MAX];
    uct_rc_gdr_acs_t          acs;
    uint16_t                  acs_ctrl;    /* valid when ACS was found */
    uint16_t                  acs_offset;  /* capability offset, or 0 */
} uct_rc_gdr_topo_bridge_t;


typedef struct uct_rc_gdr_topo_dev {
    char                      bdf[UCT_RC_GDR_BDF_MAX]; /* "" if none */
    char                      host_bridge[UCT_RC_GDR_BDF_MAX]; /* pci0000:00 */
    int                       numa_node;   /* -1: not known */
    unsigned                  num_bridges; /* root port first */
    char                      bridges[UCT_RC_GDR_TOPO_MAX_DEPTH]
                                     [UCT_RC_GDR_BDF_MAX];
    uct_rc_gdr_iommu_t        iommu;
    char                      iommu_type[24]; /* as read, e.g. "DMA-FQ" */
} uct_rc_gdr_topo_dev_t;


typedef struct uct_rc_gdr_topo {
    uct_rc_gdr_topo_outcome_t outcome;
    uct_rc_gdr_dist_t         dist;
    char                      reason[UCT_RC_GDR_TOPO_REASON_MAX];
    char                      sysfs_root[UCT_RC_GDR_TOPO_ROOT_MAX];
    char                      nic_name[64];  /* as given by the caller */
    uct_rc_gdr_topo_dev_t     gpu;
    uct_rc_gdr_topo_dev_t     nic;
    int                       iommu_present; /* <root>/class/iommu/ entries */
    /* Bridges the peer-to-peer traffic crosses, with their ACS state */
    unsigned                  num_route;
    uct_rc_gdr_topo_bridge_t  route[2 * UCT_RC_GDR_TOPO_MAX_DEPTH];
} uct_rc_gdr_topo_t;


/**
 * Classify the PCIe distance between a GPU and a NIC.
 *
 * @param [in]  sysfs_root  "/sys", or the root of a synthetic tree.
 * @param [in]  gpu_bdf     GPU PCI address ("0000:17:00.0"; CUDA's and
 *                          nvidia-smi's spellings are accepted).
 * @param [in]  nic         NIC as a PCI address or a verbs device name
 *                          ("mlx5_0", "rxe0").
 * @param [out] topo_p      Filled with the distance, the reason in words and
 *                          the evidence (ACS on the route, IOMMU mode).
 *
 * @return UCS_OK when @a topo_p was filled, including the outcomes where the
 *         distance is unknown (virtual NIC, device not in sysfs);
 *         UCS_ERR_INVALID_PARAM for a malformed GPU address or empty names.
 */
ucs_status_t uct_rc_gdr_topo_classify(const char *sysfs_root,
                                      const char *gpu_bdf, const char *nic,
                                      uct_rc_gdr_topo_t *topo_p);


/**
 * One PCI function's place in the tree, as the distance check reads it: its
 * host bridge, the bridges above it (root port first), its NUMA node and its
 * IOMMU mode (rc_gdr_info prints it for each GPU).
 *
 * @return UCS_OK, UCS_ERR_INVALID_PARAM for a malformed address or root,
 *         else why the function was not found below @a sysfs_root.
 */
ucs_status_t uct_rc_gdr_topo_dev_query(const char *sysfs_root, const char *bdf,
                                       uct_rc_gdr_topo_dev_t *dev);


/**
 * Parse a PCI address ("0000:17:00.0", "00000000:17:00.0", "17:00.0", any
 * case) into the spelling sysfs uses ("0000:17:00.0").
 */
ucs_status_t uct_rc_gdr_topo_bdf_parse(const char *str, char *bdf,
                                       size_t max);


/**
 * The PCI function of a verbs device, as UCX's IB devices find theirs: the
 * real path of <ibdev_path>/device (ibv_device's ibdev_path,
 * "/sys/class/infiniband/mlx5_0"). A software device on a netdev (rxe) has
 * no such link: it is placed on the PCI function of the netdev it names in
 * <ibdev_path>/parent, through which its traffic leaves.
 *
 * @return UCS_OK with @a bdf ("0000:17:00.0"); UCS_ERR_NO_ELEM when neither
 *         link exists (rxe on a veth, siw); UCS_ERR_UNSUPPORTED when it
 *         leads to no PCI function.
 */
ucs_status_t uct_rc_gdr_topo_ibdev_bdf(const char *ibdev_path, char *bdf,
                                       size_t max);


/**
 * A PCI address ("0000:17:00.0", or CUDA's and nvidia-smi's spellings) as
 * UCX's topology takes it. UCS_ERR_UNSUPPORTED for a domain wider than 16
 * bits (VMD), which ucs_sys_bus_id_t cannot hold.
 */
ucs_status_t uct_rc_gdr_topo_bus_id_parse(const char *bdf,
                                          ucs_sys_bus_id_t *bus_id_p);


/** "LOC" ... "SYS", "UNKNOWN" */
const char *uct_rc_gdr_topo_dist_name(uct_rc_gdr_dist_t dist);


/**
 * Parse a distance class name, case-insensitive; UNKNOWN is not accepted.
 * Returns UCS_ERR_INVALID_PARAM without logging: the caller knows which
 * setting the value came from, and says so.
 */
ucs_status_t uct_rc_gdr_topo_dist_parse(const char *str,
                                        uct_rc_gdr_dist_t *dist_p);


/** "identity", "DMA (translated)", ... */
const char *uct_rc_gdr_topo_iommu_name(uct_rc_gdr_iommu_t iommu);

END_C_DECLS

#endif

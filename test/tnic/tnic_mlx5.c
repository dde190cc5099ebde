/*
 * The stand-in libmlx5.so.1: UCX's IB libraries link libmlx5 and call
 * mlx5dv_is_supported() before anything else of it. Every device of the
 * stand-in NIC answers "not an mlx5 device", so UCX keeps to its generic verbs
 * paths; every other entry point is an explicit stub that fails as rdma-core
 * does for a device its provider does not drive (EOPNOTSUPP, or NULL with
 * errno set). The list of symbols and their versions is that of rdma-core
 * 44's libmlx5.so.1 (tnic_mlx5.map).
 */

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

#define TNIC_MLX5_STUB_INT(_name) \
    int _name(void); \
    int _name(void) \
    { \
        errno = EOPNOTSUPP; \
        return EOPNOTSUPP; \
    }

#define TNIC_MLX5_STUB_PTR(_name) \
    void *_name(void); \
    void *_name(void) \
    { \
        errno = EOPNOTSUPP; \
        return NULL; \
    }

#define TNIC_MLX5_STUB_VOID(_name) \
    void _name(void); \
    void _name(void) \
    { \
    }

bool mlx5dv_is_supported(void *device);

bool mlx5dv_is_supported(void *device)
{
    (void)device;
    return false;
}

TNIC_MLX5_STUB_INT(_mlx5dv_mkey_check)
TNIC_MLX5_STUB_INT(_mlx5dv_query_port)
TNIC_MLX5_STUB_PTR(mlx5dv_alloc_dm)
TNIC_MLX5_STUB_PTR(mlx5dv_alloc_var)
TNIC_MLX5_STUB_PTR(mlx5dv_create_cq)
TNIC_MLX5_STUB_PTR(mlx5dv_create_flow)
TNIC_MLX5_STUB_PTR(mlx5dv_create_flow_action_esp)
TNIC_MLX5_STUB_PTR(mlx5dv_create_flow_action_modify_header)
TNIC_MLX5_STUB_PTR(mlx5dv_create_flow_action_packet_reformat)
TNIC_MLX5_STUB_PTR(mlx5dv_create_flow_matcher)
TNIC_MLX5_STUB_PTR(mlx5dv_create_mkey)
TNIC_MLX5_STUB_PTR(mlx5dv_create_qp)
TNIC_MLX5_STUB_PTR(mlx5dv_create_steering_anchor)
TNIC_MLX5_STUB_PTR(mlx5dv_create_wq)
TNIC_MLX5_STUB_INT(mlx5dv_crypto_login)
TNIC_MLX5_STUB_PTR(mlx5dv_crypto_login_create)
TNIC_MLX5_STUB_INT(mlx5dv_crypto_login_destroy)
TNIC_MLX5_STUB_INT(mlx5dv_crypto_login_query)
TNIC_MLX5_STUB_INT(mlx5dv_crypto_login_query_state)
TNIC_MLX5_STUB_INT(mlx5dv_crypto_logout)
TNIC_MLX5_STUB_INT(mlx5dv_dci_stream_id_reset)
TNIC_MLX5_STUB_PTR(mlx5dv_dek_create)
TNIC_MLX5_STUB_INT(mlx5dv_dek_destroy)
TNIC_MLX5_STUB_INT(mlx5dv_dek_query)
TNIC_MLX5_STUB_INT(mlx5dv_destroy_flow_matcher)
TNIC_MLX5_STUB_INT(mlx5dv_destroy_mkey)
TNIC_MLX5_STUB_INT(mlx5dv_destroy_steering_anchor)
TNIC_MLX5_STUB_PTR(mlx5dv_devx_alloc_msi_vector)
TNIC_MLX5_STUB_PTR(mlx5dv_devx_alloc_uar)
TNIC_MLX5_STUB_INT(mlx5dv_devx_cq_modify)
TNIC_MLX5_STUB_INT(mlx5dv_devx_cq_query)
TNIC_MLX5_STUB_PTR(mlx5dv_devx_create_cmd_comp)
TNIC_MLX5_STUB_PTR(mlx5dv_devx_create_eq)
TNIC_MLX5_STUB_PTR(mlx5dv_devx_create_event_channel)
TNIC_MLX5_STUB_VOID(mlx5dv_devx_destroy_cmd_comp)
TNIC_MLX5_STUB_INT(mlx5dv_devx_destroy_eq)
TNIC_MLX5_STUB_VOID(mlx5dv_devx_destroy_event_channel)
TNIC_MLX5_STUB_INT(mlx5dv_devx_free_msi_vector)
TNIC_MLX5_STUB_VOID(mlx5dv_devx_free_uar)
TNIC_MLX5_STUB_INT(mlx5dv_devx_general_cmd)
TNIC_MLX5_STUB_INT(mlx5dv_devx_get_async_cmd_comp)
TNIC_MLX5_STUB_INT(mlx5dv_devx_get_event)
TNIC_MLX5_STUB_INT(mlx5dv_devx_ind_tbl_modify)
TNIC_MLX5_STUB_INT(mlx5dv_devx_ind_tbl_query)
TNIC_MLX5_STUB_PTR(mlx5dv_devx_obj_create)
TNIC_MLX5_STUB_INT(mlx5dv_devx_obj_destroy)
TNIC_MLX5_STUB_INT(mlx5dv_devx_obj_modify)
TNIC_MLX5_STUB_INT(mlx5dv_devx_obj_query)
TNIC_MLX5_STUB_INT(mlx5dv_devx_obj_query_async)
TNIC_MLX5_STUB_INT(mlx5dv_devx_qp_modify)
TNIC_MLX5_STUB_INT(mlx5dv_devx_qp_query)
TNIC_MLX5_STUB_INT(mlx5dv_devx_query_eqn)
TNIC_MLX5_STUB_INT(mlx5dv_devx_srq_modify)
TNIC_MLX5_STUB_INT(mlx5dv_devx_srq_query)
TNIC_MLX5_STUB_INT(mlx5dv_devx_subscribe_devx_event)
TNIC_MLX5_STUB_INT(mlx5dv_devx_subscribe_devx_event_fd)
TNIC_MLX5_STUB_INT(mlx5dv_devx_umem_dereg)
TNIC_MLX5_STUB_PTR(mlx5dv_devx_umem_reg)
TNIC_MLX5_STUB_PTR(mlx5dv_devx_umem_reg_ex)
TNIC_MLX5_STUB_INT(mlx5dv_devx_wq_modify)
TNIC_MLX5_STUB_INT(mlx5dv_devx_wq_query)
TNIC_MLX5_STUB_PTR(mlx5dv_dm_map_op_addr)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_action_create_aso)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_action_create_default_miss)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_action_create_dest_array)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_action_create_dest_devx_tir)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_action_create_dest_ib_port)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_action_create_dest_ibv_qp)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_action_create_dest_root_table)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_action_create_dest_table)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_action_create_dest_vport)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_action_create_drop)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_action_create_flow_counter)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_action_create_flow_meter)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_action_create_flow_sampler)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_action_create_modify_header)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_action_create_packet_reformat)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_action_create_pop_vlan)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_action_create_push_vlan)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_action_create_tag)
TNIC_MLX5_STUB_INT(mlx5dv_dr_action_destroy)
TNIC_MLX5_STUB_INT(mlx5dv_dr_action_modify_aso)
TNIC_MLX5_STUB_INT(mlx5dv_dr_action_modify_flow_meter)
TNIC_MLX5_STUB_INT(mlx5dv_dr_aso_other_domain_link)
TNIC_MLX5_STUB_INT(mlx5dv_dr_aso_other_domain_unlink)
TNIC_MLX5_STUB_VOID(mlx5dv_dr_domain_allow_duplicate_rules)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_domain_create)
TNIC_MLX5_STUB_INT(mlx5dv_dr_domain_destroy)
TNIC_MLX5_STUB_VOID(mlx5dv_dr_domain_set_reclaim_device_memory)
TNIC_MLX5_STUB_INT(mlx5dv_dr_domain_sync)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_matcher_create)
TNIC_MLX5_STUB_INT(mlx5dv_dr_matcher_destroy)
TNIC_MLX5_STUB_INT(mlx5dv_dr_matcher_set_layout)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_rule_create)
TNIC_MLX5_STUB_INT(mlx5dv_dr_rule_destroy)
TNIC_MLX5_STUB_PTR(mlx5dv_dr_table_create)
TNIC_MLX5_STUB_INT(mlx5dv_dr_table_destroy)
TNIC_MLX5_STUB_INT(mlx5dv_dump_dr_domain)
TNIC_MLX5_STUB_INT(mlx5dv_dump_dr_matcher)
TNIC_MLX5_STUB_INT(mlx5dv_dump_dr_rule)
TNIC_MLX5_STUB_INT(mlx5dv_dump_dr_table)
TNIC_MLX5_STUB_VOID(mlx5dv_free_var)
TNIC_MLX5_STUB_INT(mlx5dv_get_clock_info)
TNIC_MLX5_STUB_PTR(mlx5dv_get_vfio_device_list)
TNIC_MLX5_STUB_INT(mlx5dv_init_obj)
TNIC_MLX5_STUB_INT(mlx5dv_map_ah_to_qp)
TNIC_MLX5_STUB_INT(mlx5dv_modify_qp_lag_port)
TNIC_MLX5_STUB_INT(mlx5dv_modify_qp_sched_elem)
TNIC_MLX5_STUB_INT(mlx5dv_modify_qp_udp_sport)
TNIC_MLX5_STUB_PTR(mlx5dv_open_device)
TNIC_MLX5_STUB_PTR(mlx5dv_pp_alloc)
TNIC_MLX5_STUB_VOID(mlx5dv_pp_free)
TNIC_MLX5_STUB_INT(mlx5dv_qp_cancel_posted_send_wrs)
TNIC_MLX5_STUB_PTR(mlx5dv_qp_ex_from_ibv_qp_ex)
TNIC_MLX5_STUB_INT(mlx5dv_query_device)
TNIC_MLX5_STUB_INT(mlx5dv_query_qp_lag_port)
TNIC_MLX5_STUB_INT(mlx5dv_reserved_qpn_alloc)
TNIC_MLX5_STUB_INT(mlx5dv_reserved_qpn_dealloc)
TNIC_MLX5_STUB_PTR(mlx5dv_sched_leaf_create)
TNIC_MLX5_STUB_INT(mlx5dv_sched_leaf_destroy)
TNIC_MLX5_STUB_INT(mlx5dv_sched_leaf_modify)
TNIC_MLX5_STUB_PTR(mlx5dv_sched_node_create)
TNIC_MLX5_STUB_INT(mlx5dv_sched_node_destroy)
TNIC_MLX5_STUB_INT(mlx5dv_sched_node_modify)
TNIC_MLX5_STUB_INT(mlx5dv_set_context_attr)
TNIC_MLX5_STUB_INT(mlx5dv_vfio_get_events_fd)
TNIC_MLX5_STUB_INT(mlx5dv_vfio_process_events)

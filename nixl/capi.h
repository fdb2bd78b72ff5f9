//go:build nixl && !nixlcxx

/*
 * gonixl's declarations of the part of NIXL's C API (libnixl_capi.so, the
 * nixl_capi_* functions) that capi.c calls. NIXL ships no C header for this
 * API in its wheels, so gonixl declares what it uses, from the API as NIXL
 * 1.4.0 and 1.5.1 define it (docs/binding.md lists the sources). Every call
 * returns a capi_status; handles are opaque pointers owned by the library.
 *
 * The library is C++ behind these functions. Each of them catches what the
 * agent throws and returns a status instead, so no C++ exception reaches
 * cgo: catch (...) everywhere but in the notification calls (getNotifs and
 * the notification map's), which catch std::exception, all NIXL throws
 * there (read in NIXL's sources for every function declared here).
 */
#ifndef GONIXL_CAPI_H
#define GONIXL_CAPI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* nixl_capi_status_t. NIXL 1.4.0 reports every failure of the agent as
 * CAPI_BACKEND; 1.5 also keeps NIXL_ERR_NOT_FOUND, NIXL_ERR_INVALID_PARAM
 * and NIXL_ERR_NO_TELEMETRY apart. */
typedef enum {
	CAPI_SUCCESS = 0,
	CAPI_IN_PROG = 1,
	CAPI_INVALID_PARAM = -1,
	CAPI_BACKEND = -2,
	CAPI_INVALID_STATE = -3,
	CAPI_EXCEPTION = -4,
	CAPI_NO_TELEMETRY = -5,
	CAPI_NOT_FOUND = -6,
} capi_status;

/* Opaque handles. */
typedef struct nixl_capi_agent_s *capi_agent;
typedef struct nixl_capi_params_s *capi_params;
typedef struct nixl_capi_mem_list_s *capi_mem_list;
typedef struct nixl_capi_string_list_s *capi_string_list;
typedef struct nixl_capi_backend_s *capi_backend;
typedef struct nixl_capi_opt_args_s *capi_opt_args;
typedef struct nixl_capi_param_iter_s *capi_param_iter;
typedef struct nixl_capi_xfer_dlist_s *capi_xfer_dlist;
typedef struct nixl_capi_xfer_dlist_handle_s *capi_dlist_handle;
typedef struct nixl_capi_reg_dlist_s *capi_reg_dlist;
typedef struct nixl_capi_xfer_req_s *capi_xfer_req;
typedef struct nixl_capi_notif_map_s *capi_notif_map;
typedef struct nixl_capi_query_resp_list_s *capi_query_resp_list;

/* nixl_capi_agent_config_t: nixlAgentConfig's fields as the C API takes
 * them (it has no etcd watch timeout; num_workers is not read). thread_sync
 * takes nixl_thread_sync_t's values. */
typedef struct {
	bool enable_prog_thread;
	bool enable_listen_thread;
	int listen_port;
	int thread_sync;
	unsigned int num_workers;
	uint64_t pthr_delay_us;
	uint64_t lthr_delay_us;
	bool capture_telemetry;
} capi_agent_config;

/* nixl_capi_xfer_telemetry_s. start_time_us is the steady clock's reading
 * (CLOCK_MONOTONIC on Linux) when the transfer was posted. */
typedef struct {
	uint64_t start_time_us;
	uint64_t post_duration_us;
	uint64_t xfer_duration_us;
	uint64_t total_bytes;
	uint64_t desc_count;
} capi_telemetry;

/* Memory types, operations and cost methods take the values of nixl_mem_t,
 * nixl_xfer_op_t and nixl_cost_t, passed as int. */

/* Agent. */
int nixl_capi_create_configured_agent(const char *name, const capi_agent_config *cfg,
                                      capi_agent *agent);
int nixl_capi_destroy_agent(capi_agent agent);

/* Metadata. Blobs come back malloc'd (free), agent names strdup'd. */
int nixl_capi_get_local_md(capi_agent agent, void **data, size_t *len);
int nixl_capi_get_local_partial_md(capi_agent agent, capi_reg_dlist descs, void **data,
                                   size_t *len, capi_opt_args opts);
int nixl_capi_load_remote_md(capi_agent agent, const void *data, size_t len, char **agent_name);
int nixl_capi_invalidate_remote_md(capi_agent agent, const char *remote);
int nixl_capi_invalidate_local_md(capi_agent agent, capi_opt_args opts);
int nixl_capi_check_remote_md(capi_agent agent, const char *remote, capi_xfer_dlist descs);
int nixl_capi_send_local_md(capi_agent agent, capi_opt_args opts);
int nixl_capi_send_local_partial_md(capi_agent agent, capi_reg_dlist descs, capi_opt_args opts);
int nixl_capi_fetch_remote_md(capi_agent agent, const char *remote, capi_opt_args opts);
int nixl_capi_agent_make_connection(capi_agent agent, const char *remote, capi_opt_args opts);

/* Plugins, backends and their parameters. */
int nixl_capi_get_available_plugins(capi_agent agent, capi_string_list *plugins);
int nixl_capi_destroy_string_list(capi_string_list list);
int nixl_capi_string_list_size(capi_string_list list, size_t *size);
int nixl_capi_string_list_get(capi_string_list list, size_t index, const char **str);
int nixl_capi_get_plugin_params(capi_agent agent, const char *plugin, capi_mem_list *mems,
                                capi_params *params);
int nixl_capi_create_backend(capi_agent agent, const char *plugin, capi_params params,
                             capi_backend *backend);
/* Frees the handle only; the backend belongs to the agent. */
int nixl_capi_destroy_backend(capi_backend backend);
int nixl_capi_get_backend_params(capi_agent agent, capi_backend backend, capi_mem_list *mems,
                                 capi_params *params);
int nixl_capi_destroy_mem_list(capi_mem_list list);
int nixl_capi_mem_list_size(capi_mem_list list, size_t *size);
int nixl_capi_mem_list_get(capi_mem_list list, size_t index, int *mem);
int nixl_capi_create_params(capi_params *params);
int nixl_capi_destroy_params(capi_params params);
int nixl_capi_params_add(capi_params params, const char *key, const char *value);
int nixl_capi_params_is_empty(capi_params params, bool *empty);
int nixl_capi_params_create_iterator(capi_params params, capi_param_iter *iter);
/* Yields the next pair (valid until the next call) and whether another
 * follows; must not be called on empty params. */
int nixl_capi_params_iterator_next(capi_param_iter iter, const char **key, const char **value,
                                   bool *has_next);
int nixl_capi_params_destroy_iterator(capi_param_iter iter);

/* Optional arguments. */
int nixl_capi_create_opt_args(capi_opt_args *opts);
int nixl_capi_destroy_opt_args(capi_opt_args opts);
int nixl_capi_opt_args_add_backend(capi_opt_args opts, capi_backend backend);
int nixl_capi_opt_args_set_notif_msg(capi_opt_args opts, const void *data, size_t len);
int nixl_capi_opt_args_set_has_notif(capi_opt_args opts, bool has_notif);
int nixl_capi_opt_args_set_skip_desc_merge(capi_opt_args opts, bool skip);
int nixl_capi_opt_args_set_ip_addr(capi_opt_args opts, const char *ip_addr);
int nixl_capi_opt_args_set_port(capi_opt_args opts, uint16_t port);
/* NIXL 1.5 and later only: declared weak, NULL when the library lacks it. */
int nixl_capi_opt_args_set_custom_param(capi_opt_args opts, const void *data, size_t len)
    __attribute__((weak));

/* Descriptor lists. */
int nixl_capi_create_xfer_dlist(int mem, capi_xfer_dlist *dlist);
int nixl_capi_destroy_xfer_dlist(capi_xfer_dlist dlist);
int nixl_capi_xfer_dlist_add_desc(capi_xfer_dlist dlist, uintptr_t addr, size_t len,
                                  uint64_t dev_id);
int nixl_capi_create_reg_dlist(int mem, capi_reg_dlist *dlist);
int nixl_capi_destroy_reg_dlist(capi_reg_dlist dlist);
int nixl_capi_reg_dlist_add_desc(capi_reg_dlist dlist, uintptr_t addr, size_t len,
                                 uint64_t dev_id, const void *meta, size_t meta_len);

/* Memory. */
int nixl_capi_register_mem(capi_agent agent, capi_reg_dlist dlist, capi_opt_args opts);
int nixl_capi_deregister_mem(capi_agent agent, capi_reg_dlist dlist, capi_opt_args opts);
int nixl_capi_create_query_resp_list(capi_query_resp_list *list);
int nixl_capi_destroy_query_resp_list(capi_query_resp_list list);
int nixl_capi_query_resp_list_size(capi_query_resp_list list, size_t *size);
int nixl_capi_query_resp_list_has_value(capi_query_resp_list list, size_t index, bool *has);
/* A copy of entry index's parameters, for nixl_capi_destroy_params. */
int nixl_capi_query_resp_list_get_params(capi_query_resp_list list, size_t index,
                                         capi_params *params);
int nixl_capi_query_mem(capi_agent agent, capi_reg_dlist descs, capi_query_resp_list resp,
                        capi_opt_args opts);

/* Transfers. A released prepared list's handle is freed by the release; a
 * request's handle outlives releaseXferReq and is freed by
 * nixl_capi_destroy_xfer_req once released. */
int nixl_capi_prep_xfer_dlist(capi_agent agent, const char *remote, capi_xfer_dlist descs,
                              capi_dlist_handle *dlist, capi_opt_args opts);
int nixl_capi_release_xfer_dlist_handle(capi_agent agent, capi_dlist_handle dlist);
int nixl_capi_make_xfer_req(capi_agent agent, int op, capi_dlist_handle local,
                            const int *local_idx, size_t n_local, capi_dlist_handle remote,
                            const int *remote_idx, size_t n_remote, capi_xfer_req *req,
                            capi_opt_args opts);
int nixl_capi_create_xfer_req(capi_agent agent, int op, capi_xfer_dlist local,
                              capi_xfer_dlist remote, const char *remote_agent,
                              capi_xfer_req *req, capi_opt_args opts);
int nixl_capi_estimate_xfer_cost(capi_agent agent, capi_xfer_req req, capi_opt_args opts,
                                 int64_t *duration_us, int64_t *err_margin_us, int *method);
int nixl_capi_post_xfer_req(capi_agent agent, capi_xfer_req req, capi_opt_args opts);
int nixl_capi_get_xfer_status(capi_agent agent, capi_xfer_req req);
/* The backend comes back in a new handle, for nixl_capi_destroy_backend. */
int nixl_capi_query_xfer_backend(capi_agent agent, capi_xfer_req req, capi_backend *backend);
int nixl_capi_get_xfer_telemetry(capi_agent agent, capi_xfer_req req, capi_telemetry *out);
int nixl_capi_release_xfer_req(capi_agent agent, capi_xfer_req req);
int nixl_capi_destroy_xfer_req(capi_xfer_req req);

/* Notifications. getNotifs adds to the map; entries stay valid until the
 * map is cleared or destroyed. */
int nixl_capi_create_notif_map(capi_notif_map *map);
int nixl_capi_destroy_notif_map(capi_notif_map map);
int nixl_capi_notif_map_clear(capi_notif_map map);
int nixl_capi_notif_map_size(capi_notif_map map, size_t *size);
int nixl_capi_notif_map_get_agent_at(capi_notif_map map, size_t index, const char **agent);
int nixl_capi_notif_map_get_notifs_size(capi_notif_map map, const char *agent, size_t *size);
int nixl_capi_notif_map_get_notif(capi_notif_map map, const char *agent, size_t index,
                                  const void **data, size_t *len);
int nixl_capi_get_notifs(capi_agent agent, capi_notif_map map, capi_opt_args opts);
int nixl_capi_gen_notif(capi_agent agent, const char *remote, const void *data, size_t len,
                        capi_opt_args opts);

#endif

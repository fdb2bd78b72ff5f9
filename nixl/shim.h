//go:build nixl

/*
 * gonixl's C interface to NIXL's agent, implemented twice: over NIXL's C API
 * by capi.c (the default), over its C++ agent (nixl.h) by shim.cc (build tag
 * nixlcxx).
 *
 * Rules every entry point follows:
 *   - it returns a nixl_status_t value as an int and never lets a C++
 *     exception escape (shim.cc reports one as NIXL_ERR_UNKNOWN; over the C
 *     API, NIXL's C API catches it and capi.c reports what the C API says);
 *   - descriptor lists cross as whole arrays, one call per list;
 *   - pointers it receives are valid for the call only: it copies what it
 *     keeps, so Go memory is never retained by C;
 *   - variable-size results come back in one malloc'd buffer (nixlgo_buf)
 *     that the caller frees with free(); the encoding is described at
 *     nixlgo_buf.
 *
 * Agents, backends, prepared lists and transfer requests are passed as
 * uintptr_t values of the C++ pointers; Go keeps them in its own tables and
 * never dereferences them.
 */
#ifndef GONIXL_SHIM_H
#define GONIXL_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A transfer descriptor (nixlBasicDesc). */
typedef struct {
	uint64_t addr;
	uint64_t len;
	uint64_t dev_id;
} nixlgo_desc;

/* A registration descriptor (nixlBlobDesc): its metadata is the byte range
 * [meta_off, meta_off+meta_len) of the blob passed alongside the array. */
typedef struct {
	uint64_t addr;
	uint64_t len;
	uint64_t dev_id;
	uint64_t meta_off;
	uint64_t meta_len;
} nixlgo_reg_desc;

/* nixl_opt_args_t, flattened. Passed by value; present == 0 means "no
 * extra_params" (nullptr). Strings are (pointer, length) pairs. */
typedef struct {
	int present;
	const uintptr_t *backends; /* nixlBackendH* values */
	size_t n_backends;
	int has_notif;
	const char *notif;
	size_t notif_len;
	int skip_desc_merge;
	int include_conn_info;
	const char *ip_addr;
	size_t ip_addr_len;
	int port; /* 0: NIXL's default_comm_port */
	const char *metadata_label;
	size_t metadata_label_len;
	const char *custom_param;
	size_t custom_param_len;
} nixlgo_opts;

/* nixlAgentConfig. Durations in microseconds. */
typedef struct {
	int use_prog_thread;
	int use_listen_thread;
	uint16_t listen_port;
	int sync_mode; /* nixl_thread_sync_t */
	int capture_telemetry;
	uint64_t pthr_delay_us;
	uint64_t lthr_delay_us;
	uint64_t etcd_watch_timeout_us;
} nixlgo_config;

/*
 * A result buffer, allocated with malloc (data may be NULL when len is 0).
 * Encodings, all integers little-endian uint64 ("u64"), byte strings as a
 * u64 length followed by the bytes ("bytes"):
 *   blob:    the raw bytes (metadata, agent name)
 *   strings: u64 count, then count bytes
 *   params:  u64 count, then count (bytes key, bytes value) pairs, as
 *            written by nixlgo_encode-compatible Go code
 *   mems+params: u64 count, count u64 memory types, then params
 *   query:   u64 count, then per entry u64 has_value and, if 1, params
 * Notifications do not use this encoding: see nixlgo_notif.
 */
typedef struct {
	char *data;
	size_t len;
} nixlgo_buf;

/* nixl_xfer_telem_t. start_age_ns is how long ago (steady clock) the
 * transfer was posted, so Go can turn it into wall-clock time. */
typedef struct {
	int64_t start_age_ns;
	int64_t post_us;
	int64_t xfer_us;
	uint64_t total_bytes;
	uint64_t desc_count;
} nixlgo_telemetry;

/* Agent lifetime. */
int nixlgo_agent_new(const char *name, size_t name_len, nixlgo_config cfg, uintptr_t *agent);
int nixlgo_agent_delete(uintptr_t agent);

/* Plugins and backends. */
int nixlgo_get_avail_plugins(uintptr_t agent, nixlgo_buf *out);
int nixlgo_get_plugin_params(uintptr_t agent, const char *type, size_t type_len, nixlgo_buf *out);
int nixlgo_create_backend(uintptr_t agent, const char *type, size_t type_len,
                          const char *params, size_t params_len, uintptr_t *backend);
int nixlgo_get_backend_params(uintptr_t agent, uintptr_t backend, nixlgo_buf *out);

/* Memory. */
int nixlgo_register_mem(uintptr_t agent, int mem, const nixlgo_reg_desc *descs, size_t n,
                        const char *meta, size_t meta_len, nixlgo_opts opts);
int nixlgo_deregister_mem(uintptr_t agent, int mem, const nixlgo_reg_desc *descs, size_t n,
                          const char *meta, size_t meta_len, nixlgo_opts opts);
int nixlgo_query_mem(uintptr_t agent, int mem, const nixlgo_reg_desc *descs, size_t n,
                     const char *meta, size_t meta_len, nixlgo_opts opts, nixlgo_buf *out);

/* Metadata. */
int nixlgo_get_local_md(uintptr_t agent, nixlgo_buf *out);
int nixlgo_get_local_partial_md(uintptr_t agent, int mem, const nixlgo_reg_desc *descs, size_t n,
                                const char *meta, size_t meta_len, nixlgo_opts opts,
                                nixlgo_buf *out);
int nixlgo_load_remote_md(uintptr_t agent, const char *md, size_t md_len, nixlgo_buf *name);
int nixlgo_invalidate_remote_md(uintptr_t agent, const char *remote, size_t remote_len);
int nixlgo_check_remote_md(uintptr_t agent, const char *remote, size_t remote_len, int mem,
                           const nixlgo_desc *descs, size_t n);
int nixlgo_send_local_md(uintptr_t agent, nixlgo_opts opts);
int nixlgo_send_local_partial_md(uintptr_t agent, int mem, const nixlgo_reg_desc *descs, size_t n,
                                 const char *meta, size_t meta_len, nixlgo_opts opts);
int nixlgo_fetch_remote_md(uintptr_t agent, const char *remote, size_t remote_len,
                           nixlgo_opts opts);
int nixlgo_invalidate_local_md(uintptr_t agent, nixlgo_opts opts);
int nixlgo_make_connection(uintptr_t agent, const char *remote, size_t remote_len,
                           nixlgo_opts opts);

/* Transfers. */
int nixlgo_prep_xfer_dlist(uintptr_t agent, const char *remote, size_t remote_len, int mem,
                           const nixlgo_desc *descs, size_t n, nixlgo_opts opts,
                           uintptr_t *dlist);
int nixlgo_release_dlist(uintptr_t agent, uintptr_t dlist);
int nixlgo_make_xfer_req(uintptr_t agent, int op, uintptr_t local, const int *local_idx,
                         size_t n_local, uintptr_t remote, const int *remote_idx, size_t n_remote,
                         nixlgo_opts opts, uintptr_t *req);
int nixlgo_create_xfer_req(uintptr_t agent, int op, int local_mem, const nixlgo_desc *local,
                           size_t n_local, int remote_mem, const nixlgo_desc *remote,
                           size_t n_remote, const char *remote_agent, size_t remote_agent_len,
                           nixlgo_opts opts, uintptr_t *req);
/* nixlgo_create_post_xfer_req is createXferReq then, when that succeeds,
 * postXferReq with no options (the creation-time notification is kept),
 * in one crossing; when the post fails, releaseXferReq. It returns
 * createXferReq's status; *post is postXferReq's, *released is
 * releaseXferReq's (NIXL_SUCCESS when it was not needed); *req is the
 * request whenever it is still live. */
int nixlgo_create_post_xfer_req(uintptr_t agent, int op, int local_mem, const nixlgo_desc *local,
                                size_t n_local, int remote_mem, const nixlgo_desc *remote,
                                size_t n_remote, const char *remote_agent,
                                size_t remote_agent_len, nixlgo_opts opts, uintptr_t *req,
                                int *post, int *released);
int nixlgo_estimate_xfer_cost(uintptr_t agent, uintptr_t req, nixlgo_opts opts,
                              int64_t *duration_us, int64_t *err_margin_us, int *method);
int nixlgo_post_xfer_req(uintptr_t agent, uintptr_t req, nixlgo_opts opts);
/* nixlgo_post_xfer_req with no options (extra_params nullptr). */
int nixlgo_post_xfer_req_plain(uintptr_t agent, uintptr_t req);
int nixlgo_get_xfer_status(uintptr_t agent, uintptr_t req);
int nixlgo_query_xfer_backend(uintptr_t agent, uintptr_t req, uintptr_t *backend);
int nixlgo_get_xfer_telemetry(uintptr_t agent, uintptr_t req, nixlgo_telemetry *out);
int nixlgo_release_xfer_req(uintptr_t agent, uintptr_t req);
/* nixlgo_release_xfer_req on reqs[0..n), in order, statuses[i] its result
 * for reqs[i]: several releases in one crossing. */
void nixlgo_release_xfer_reqs(uintptr_t agent, const uintptr_t *reqs, int32_t *statuses, size_t n);

/* Notifications. The calls that fetch them (nixlgo_get_notifs,
 * nixlgo_poll) fill the caller's nixl_notifs_t (notifs_map, from
 * nixlgo_notifs_map_new: cleared and reused per call, as a C++ poller
 * reuses its map) and list what arrived as an array of nixlgo_notif, one
 * per message, a sender's messages consecutive and in the order sent. The
 * entries point into that map's strings, so they are valid until the next
 * call with the same map; nothing is encoded or copied. The array is
 * written into the caller's C buffer scratch when it fits (then notifs ==
 * scratch), else into a malloc'd block the caller frees; notifs is NULL
 * when nothing arrived. The result is returned as a struct, not through
 * pointers, to keep the polling path free of cgo pointer checks. */
typedef struct {
	const char *from;
	size_t from_len;
	const char *msg;
	size_t msg_len;
} nixlgo_notif;
typedef struct {
	int status;
	nixlgo_notif *notifs;
	size_t n;
} nixlgo_notifs_result;
nixlgo_notifs_result nixlgo_get_notifs(uintptr_t agent, nixlgo_opts opts, uintptr_t scratch,
                                       size_t scratch_cap, uintptr_t notifs_map);
/* A nixl_notifs_t for the calls above; 0 when out of memory. */
uintptr_t nixlgo_notifs_map_new(void);
void nixlgo_notifs_map_free(uintptr_t notifs_map);
/* nixlgo_poll is one polling round in one crossing: getXferStatus on each of
 * the n requests in order, its status written to statuses[i], then, when
 * want_notifs is non-zero, getNotifs with no options, its result returned
 * as nixlgo_get_notifs returns it (status is then getNotifs' status; it is
 * NIXL_SUCCESS when want_notifs is 0). A C++ exception while polling a
 * request sets that request's status to NIXL_ERR_UNKNOWN. */
nixlgo_notifs_result nixlgo_poll(uintptr_t agent, const uintptr_t *reqs, int32_t *statuses, size_t n,
                                 int want_notifs, uintptr_t scratch, size_t scratch_cap,
                                 uintptr_t notifs_map);
/* nixlgo_noop does nothing and returns x: the cost of a crossing alone, which
 * the binding's benchmarks measure beside the NIXL calls. */
int nixlgo_noop(int x);

int nixlgo_gen_notif(uintptr_t agent, const char *remote, size_t remote_len, const char *msg,
                     size_t msg_len, nixlgo_opts opts);

#ifdef __cplusplus
}
#endif

#endif

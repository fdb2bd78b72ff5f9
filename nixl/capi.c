//go:build nixl && !nixlcxx

/*
 * shim.h's entry points over NIXL's C API (capi.h), in C: what lets gonixl
 * build against NIXL's wheels, which ship libnixl_capi.so but no C++ headers.
 * shim.cc implements the same entry points over nixl.h (build tag nixlcxx).
 *
 * Every entry point returns a nixl_status_t value, as shim.cc's do. The C
 * API reports fewer statuses than the agent (capi.h), so a failure that the
 * C API folds into its backend error reaches Go as NIXL_ERR_BACKEND. What
 * the C API cannot express at all (an etcd watch timeout other than NIXL's
 * default, includeConnInfo, a metadata label, a custom parameter before NIXL
 * 1.5) is refused with NIXL_ERR_NOT_SUPPORTED before NIXL is called.
 *
 * Nothing here keeps a pointer it was given: descriptors, strings and
 * options are copied into the C API's objects, which are destroyed before
 * the entry point returns (or, for handles, when Go releases them).
 */

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capi.h"
#include "shim.h"

/* nixl_status_t values used here. */
enum {
	ST_IN_PROG = 1,
	ST_SUCCESS = 0,
	ST_INVALID_PARAM = -2,
	ST_BACKEND = -3,
	ST_NOT_FOUND = -4,
	ST_UNKNOWN = -8,
	ST_NOT_SUPPORTED = -9,
	ST_NO_TELEMETRY = -12,
};

/* NIXL's default etcdWatchTimeout (config.go's DefaultEtcdWatchTimeout),
 * the only value the C API can give an agent. */
#define DEFAULT_ETCD_WATCH_TIMEOUT_US 5000000ull

/* status turns a C API status into the nixl_status_t it stands for. */
static int status(int s) {
	switch (s) {
	case CAPI_SUCCESS:
		return ST_SUCCESS;
	case CAPI_IN_PROG:
		return ST_IN_PROG;
	case CAPI_INVALID_PARAM:
		return ST_INVALID_PARAM;
	case CAPI_NOT_FOUND:
		return ST_NOT_FOUND;
	case CAPI_NO_TELEMETRY:
		return ST_NO_TELEMETRY;
	case CAPI_BACKEND:
		return ST_BACKEND;
	default: /* CAPI_EXCEPTION, CAPI_INVALID_STATE, anything newer */
		return ST_UNKNOWN;
	}
}

/*
 * An agent handle: the C API's agent and the backend handles gonixl got
 * from nixl_capi_create_backend. queryXferBackend answers with a new handle
 * for the same backend, which nixlgo_query_xfer_backend matches against
 * these so that Go sees the handle it knows. The list is guarded because
 * under NIXL's locking sync modes Go does not serialise an agent's calls.
 */
typedef struct {
	capi_agent capi;
	pthread_mutex_t mu;
	capi_backend *backends;
	size_t n_backends;
} agent_t;

static agent_t *agentOf(uintptr_t a) { return (agent_t *)a; }

/* cstr copies (p, n) into a new NUL-terminated string; NULL when p holds a
 * NUL byte (the C API cannot carry it) or when out of memory, told apart
 * by *st. */
static char *cstr(const char *p, size_t n, int *st) {
	if (n > 0 && memchr(p, 0, n) != NULL) {
		*st = ST_INVALID_PARAM;
		return NULL;
	}
	char *s = malloc(n + 1);
	if (s == NULL) {
		*st = ST_UNKNOWN;
		return NULL;
	}
	if (n > 0) memcpy(s, p, n);
	s[n] = 0;
	return s;
}

/* A growable byte buffer for the encodings of shim.h. */
typedef struct {
	char *p;
	size_t len, cap;
	int failed;
} enc_t;

static void enc_raw(enc_t *e, const void *p, size_t n) {
	if (e->failed || n == 0) return;
	if (e->len + n > e->cap) {
		size_t c = e->cap ? e->cap : 256;
		while (c < e->len + n) c *= 2;
		char *q = realloc(e->p, c);
		if (q == NULL) {
			e->failed = 1;
			return;
		}
		e->p = q;
		e->cap = c;
	}
	memcpy(e->p + e->len, p, n);
	e->len += n;
}

static void enc_u64(enc_t *e, uint64_t v) {
	unsigned char b[8];
	for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
	enc_raw(e, b, 8);
}

static void enc_str(enc_t *e, const char *s) {
	size_t n = strlen(s);
	enc_u64(e, n);
	enc_raw(e, s, n);
}

/* enc_params appends params in the "params" encoding. */
static int enc_params(enc_t *e, capi_params params) {
	bool empty = true;
	int s = nixl_capi_params_is_empty(params, &empty);
	if (s != CAPI_SUCCESS) return status(s);
	if (empty) {
		enc_u64(e, 0);
		return ST_SUCCESS;
	}
	/* The count comes first but the C API has no size call: reserve its
	 * place and fill it in at the end. */
	size_t at = e->len;
	enc_u64(e, 0);
	capi_param_iter it;
	s = nixl_capi_params_create_iterator(params, &it);
	if (s != CAPI_SUCCESS) return status(s);
	uint64_t count = 0;
	bool more = true;
	while (more) {
		const char *k, *v;
		s = nixl_capi_params_iterator_next(it, &k, &v, &more);
		if (s != CAPI_SUCCESS) break;
		enc_str(e, k);
		enc_str(e, v);
		count++;
	}
	nixl_capi_params_destroy_iterator(it);
	if (s != CAPI_SUCCESS) return status(s);
	if (!e->failed)
		for (int i = 0; i < 8; i++) e->p[at + i] = (char)(count >> (8 * i));
	return ST_SUCCESS;
}

/* enc_finish hands the encoding to out, or frees it on failure. */
static int enc_finish(enc_t *e, int st, nixlgo_buf *out) {
	out->data = NULL;
	out->len = 0;
	if (st == ST_SUCCESS && e->failed) st = ST_UNKNOWN;
	if (st != ST_SUCCESS || e->len == 0) {
		free(e->p);
		return st;
	}
	out->data = e->p;
	out->len = e->len;
	return st;
}

/* put_mems_params hands mems and params to out ("mems+params") and
 * destroys both. */
static int put_mems_params(capi_mem_list mems, capi_params params, nixlgo_buf *out) {
	enc_t e = {0};
	size_t n = 0;
	int st = status(nixl_capi_mem_list_size(mems, &n));
	if (st == ST_SUCCESS) {
		enc_u64(&e, n);
		for (size_t i = 0; i < n && st == ST_SUCCESS; i++) {
			int m = 0;
			st = status(nixl_capi_mem_list_get(mems, i, &m));
			enc_u64(&e, (uint64_t)m);
		}
	}
	if (st == ST_SUCCESS) st = enc_params(&e, params);
	nixl_capi_destroy_mem_list(mems);
	nixl_capi_destroy_params(params);
	return enc_finish(&e, st, out);
}

/* put_blob hands a malloc'd blob from the C API to out as it is. */
static void put_blob(void *data, size_t len, nixlgo_buf *out) {
	out->data = len > 0 ? data : NULL;
	out->len = len;
	if (len == 0) free(data);
}

/* opts_new builds the C API's options from o into *args (NULL when o is
 * absent, which the C API reads as no options). */
static int opts_new(const nixlgo_opts *o, capi_opt_args *args) {
	*args = NULL;
	if (!o->present) return ST_SUCCESS;
	if (o->include_conn_info || o->metadata_label_len > 0) return ST_NOT_SUPPORTED;
	if (o->custom_param_len > 0 && nixl_capi_opt_args_set_custom_param == NULL)
		return ST_NOT_SUPPORTED;
	int s = nixl_capi_create_opt_args(args);
	if (s != CAPI_SUCCESS) return status(s);
	for (size_t i = 0; i < o->n_backends && s == CAPI_SUCCESS; i++)
		s = nixl_capi_opt_args_add_backend(*args, (capi_backend)o->backends[i]);
	if (s == CAPI_SUCCESS && o->has_notif) {
		/* The message first: setting has_notif copies it into the notif. */
		s = nixl_capi_opt_args_set_notif_msg(*args, o->notif_len ? o->notif : "", o->notif_len);
		if (s == CAPI_SUCCESS) s = nixl_capi_opt_args_set_has_notif(*args, true);
	}
	if (s == CAPI_SUCCESS && o->skip_desc_merge)
		s = nixl_capi_opt_args_set_skip_desc_merge(*args, true);
	if (s == CAPI_SUCCESS && o->ip_addr_len > 0) {
		int st = ST_SUCCESS;
		char *ip = cstr(o->ip_addr, o->ip_addr_len, &st);
		if (ip == NULL) {
			nixl_capi_destroy_opt_args(*args);
			*args = NULL;
			return st;
		}
		s = nixl_capi_opt_args_set_ip_addr(*args, ip);
		free(ip);
	}
	if (s == CAPI_SUCCESS && o->port != 0) {
		if (o->port < 0 || o->port > 65535)
			s = CAPI_INVALID_PARAM;
		else
			s = nixl_capi_opt_args_set_port(*args, (uint16_t)o->port);
	}
	if (s == CAPI_SUCCESS && o->custom_param_len > 0)
		s = nixl_capi_opt_args_set_custom_param(*args, o->custom_param, o->custom_param_len);
	if (s != CAPI_SUCCESS) {
		nixl_capi_destroy_opt_args(*args);
		*args = NULL;
	}
	return status(s);
}

static void opts_free(capi_opt_args args) {
	if (args != NULL) nixl_capi_destroy_opt_args(args);
}

/* no_opts is an absent nixlgo_opts, for calls that take no options. */
static const nixlgo_opts no_opts;

/* A call about a remote agent: its options and its name, copied from Go's
 * arguments so that no Go pointer reaches the C API. */
typedef struct {
	capi_opt_args args;
	char *remote;
} remote_call;

/* remote_call_new builds c's options from o (opts_new's checks) and a
 * NUL-terminated copy of (remote, remote_len) (cstr's: a NUL byte in the
 * name is ST_INVALID_PARAM), in that order; on failure it returns the
 * first failure's status and leaves nothing to free. */
static int remote_call_new(const nixlgo_opts *o, const char *remote, size_t remote_len,
                           remote_call *c) {
	c->remote = NULL;
	int st = opts_new(o, &c->args);
	if (st != ST_SUCCESS) return st;
	c->remote = cstr(remote, remote_len, &st);
	if (c->remote == NULL) {
		opts_free(c->args);
		c->args = NULL;
	}
	return st;
}

static void remote_call_free(remote_call *c) {
	free(c->remote);
	opts_free(c->args);
}

static int xfer_list(int mem, const nixlgo_desc *d, size_t n, capi_xfer_dlist *l) {
	int s = nixl_capi_create_xfer_dlist(mem, l);
	if (s != CAPI_SUCCESS) return status(s);
	for (size_t i = 0; i < n && s == CAPI_SUCCESS; i++)
		s = nixl_capi_xfer_dlist_add_desc(*l, (uintptr_t)d[i].addr, (size_t)d[i].len, d[i].dev_id);
	if (s != CAPI_SUCCESS) {
		nixl_capi_destroy_xfer_dlist(*l);
		*l = NULL;
	}
	return status(s);
}

static int reg_list(int mem, const nixlgo_reg_desc *d, size_t n, const char *meta,
                    size_t meta_len, capi_reg_dlist *l) {
	for (size_t i = 0; i < n; i++)
		if (d[i].meta_len > 0 &&
		    (d[i].meta_off > meta_len || d[i].meta_len > meta_len - d[i].meta_off))
			return ST_INVALID_PARAM;
	int s = nixl_capi_create_reg_dlist(mem, l);
	if (s != CAPI_SUCCESS) return status(s);
	for (size_t i = 0; i < n && s == CAPI_SUCCESS; i++)
		s = nixl_capi_reg_dlist_add_desc(*l, (uintptr_t)d[i].addr, (size_t)d[i].len, d[i].dev_id,
		                                 d[i].meta_len ? meta + d[i].meta_off : NULL,
		                                 (size_t)d[i].meta_len);
	if (s != CAPI_SUCCESS) {
		nixl_capi_destroy_reg_dlist(*l);
		*l = NULL;
	}
	return status(s);
}

/* Agent lifetime. */

int nixlgo_agent_new(const char *name, size_t name_len, nixlgo_config c, uintptr_t *agent) {
	if (c.etcd_watch_timeout_us != DEFAULT_ETCD_WATCH_TIMEOUT_US) return ST_NOT_SUPPORTED;
	int st = ST_SUCCESS;
	char *n = cstr(name, name_len, &st);
	if (n == NULL) return st;
	agent_t *a = calloc(1, sizeof *a);
	if (a == NULL) {
		free(n);
		return ST_UNKNOWN;
	}
	capi_agent_config cfg = {
	    .enable_prog_thread = c.use_prog_thread != 0,
	    .enable_listen_thread = c.use_listen_thread != 0,
	    .listen_port = c.listen_port,
	    .thread_sync = c.sync_mode,
	    .pthr_delay_us = c.pthr_delay_us,
	    .lthr_delay_us = c.lthr_delay_us,
	    .capture_telemetry = c.capture_telemetry != 0,
	};
	st = status(nixl_capi_create_configured_agent(n, &cfg, &a->capi));
	free(n);
	if (st != ST_SUCCESS) {
		free(a);
		return st;
	}
	pthread_mutex_init(&a->mu, NULL);
	*agent = (uintptr_t)a;
	return ST_SUCCESS;
}

int nixlgo_agent_delete(uintptr_t agent) {
	agent_t *a = agentOf(agent);
	int st = status(nixl_capi_destroy_agent(a->capi));
	for (size_t i = 0; i < a->n_backends; i++) nixl_capi_destroy_backend(a->backends[i]);
	free(a->backends);
	pthread_mutex_destroy(&a->mu);
	free(a);
	return st;
}

/* Plugins and backends. */

int nixlgo_get_avail_plugins(uintptr_t agent, nixlgo_buf *out) {
	out->data = NULL;
	out->len = 0;
	capi_string_list l;
	int st = status(nixl_capi_get_available_plugins(agentOf(agent)->capi, &l));
	if (st != ST_SUCCESS) return st;
	enc_t e = {0};
	size_t n = 0;
	st = status(nixl_capi_string_list_size(l, &n));
	if (st == ST_SUCCESS) enc_u64(&e, n);
	for (size_t i = 0; i < n && st == ST_SUCCESS; i++) {
		const char *s;
		st = status(nixl_capi_string_list_get(l, i, &s));
		if (st == ST_SUCCESS) enc_str(&e, s);
	}
	nixl_capi_destroy_string_list(l);
	return enc_finish(&e, st, out);
}

int nixlgo_get_plugin_params(uintptr_t agent, const char *type, size_t type_len, nixlgo_buf *out) {
	out->data = NULL;
	out->len = 0;
	int st = ST_SUCCESS;
	char *t = cstr(type, type_len, &st);
	if (t == NULL) return st;
	capi_mem_list mems;
	capi_params params;
	st = status(nixl_capi_get_plugin_params(agentOf(agent)->capi, t, &mems, &params));
	free(t);
	if (st != ST_SUCCESS) return st;
	return put_mems_params(mems, params, out);
}

static int dec_u64(const char **p, size_t *n, uint64_t *v) {
	if (*n < 8) return 0;
	*v = 0;
	for (int i = 0; i < 8; i++) *v |= (uint64_t)(unsigned char)(*p)[i] << (8 * i);
	*p += 8;
	*n -= 8;
	return 1;
}

/* dec_str reads one "bytes" item as a new NUL-terminated string. */
static char *dec_str(const char **p, size_t *n, int *st) {
	uint64_t l;
	if (!dec_u64(p, n, &l) || l > *n) {
		*st = ST_INVALID_PARAM;
		return NULL;
	}
	char *s = cstr(*p, (size_t)l, st);
	*p += l;
	*n -= l;
	return s;
}

/* dec_params fills params from the "params" encoding Go wrote. */
static int dec_params(const char *p, size_t n, capi_params params) {
	uint64_t count;
	if (n == 0) return ST_SUCCESS;
	if (!dec_u64(&p, &n, &count)) return ST_INVALID_PARAM;
	for (uint64_t i = 0; i < count; i++) {
		int st = ST_SUCCESS;
		char *k = dec_str(&p, &n, &st);
		if (k == NULL) return st;
		char *v = dec_str(&p, &n, &st);
		if (v == NULL) {
			free(k);
			return st;
		}
		st = status(nixl_capi_params_add(params, k, v));
		free(k);
		free(v);
		if (st != ST_SUCCESS) return st;
	}
	return n == 0 ? ST_SUCCESS : ST_INVALID_PARAM;
}

int nixlgo_create_backend(uintptr_t agent, const char *type, size_t type_len, const char *params,
                          size_t params_len, uintptr_t *backend) {
	agent_t *a = agentOf(agent);
	capi_params p;
	int st = status(nixl_capi_create_params(&p));
	if (st != ST_SUCCESS) return st;
	st = dec_params(params, params_len, p);
	char *t = NULL;
	if (st == ST_SUCCESS) t = cstr(type, type_len, &st);
	if (t == NULL) {
		nixl_capi_destroy_params(p);
		return st;
	}
	/* Room for the handle first, so that a backend once created is never
	 * lost for want of memory. */
	pthread_mutex_lock(&a->mu);
	capi_backend *grown = realloc(a->backends, (a->n_backends + 1) * sizeof *grown);
	if (grown != NULL) a->backends = grown;
	pthread_mutex_unlock(&a->mu);
	if (grown == NULL) {
		free(t);
		nixl_capi_destroy_params(p);
		return ST_UNKNOWN;
	}
	capi_backend b;
	st = status(nixl_capi_create_backend(a->capi, t, p, &b));
	free(t);
	nixl_capi_destroy_params(p);
	if (st != ST_SUCCESS) return st;
	pthread_mutex_lock(&a->mu);
	a->backends[a->n_backends++] = b;
	pthread_mutex_unlock(&a->mu);
	*backend = (uintptr_t)b;
	return ST_SUCCESS;
}

int nixlgo_get_backend_params(uintptr_t agent, uintptr_t backend, nixlgo_buf *out) {
	out->data = NULL;
	out->len = 0;
	capi_mem_list mems;
	capi_params params;
	int st = status(nixl_capi_get_backend_params(agentOf(agent)->capi, (capi_backend)backend,
	                                             &mems, &params));
	if (st != ST_SUCCESS) return st;
	return put_mems_params(mems, params, out);
}

/* Memory. */

/* with_reg runs f on the registration list and options built from the
 * arguments, then destroys them. */
typedef int (*reg_fn)(capi_agent, capi_reg_dlist, capi_opt_args, void *);

static int with_reg(uintptr_t agent, int mem, const nixlgo_reg_desc *descs, size_t n,
                    const char *meta, size_t meta_len, const nixlgo_opts *opts, reg_fn f,
                    void *arg) {
	capi_reg_dlist l;
	int st = reg_list(mem, descs, n, meta, meta_len, &l);
	if (st != ST_SUCCESS) return st;
	capi_opt_args args;
	st = opts_new(opts, &args);
	if (st == ST_SUCCESS) {
		st = f(agentOf(agent)->capi, l, args, arg);
		opts_free(args);
	}
	nixl_capi_destroy_reg_dlist(l);
	return st;
}

static int do_register(capi_agent a, capi_reg_dlist l, capi_opt_args o, void *arg) {
	(void)arg;
	return status(nixl_capi_register_mem(a, l, o));
}

static int do_deregister(capi_agent a, capi_reg_dlist l, capi_opt_args o, void *arg) {
	(void)arg;
	return status(nixl_capi_deregister_mem(a, l, o));
}

static int do_send_partial(capi_agent a, capi_reg_dlist l, capi_opt_args o, void *arg) {
	(void)arg;
	return status(nixl_capi_send_local_partial_md(a, l, o));
}

static int do_query(capi_agent a, capi_reg_dlist l, capi_opt_args o, void *arg) {
	nixlgo_buf *out = arg;
	capi_query_resp_list resp;
	int st = status(nixl_capi_create_query_resp_list(&resp));
	if (st != ST_SUCCESS) return st;
	st = status(nixl_capi_query_mem(a, l, resp, o));
	enc_t e = {0};
	size_t n = 0;
	if (st == ST_SUCCESS) st = status(nixl_capi_query_resp_list_size(resp, &n));
	if (st == ST_SUCCESS) enc_u64(&e, n);
	for (size_t i = 0; i < n && st == ST_SUCCESS; i++) {
		bool has = false;
		st = status(nixl_capi_query_resp_list_has_value(resp, i, &has));
		if (st != ST_SUCCESS) break;
		enc_u64(&e, has ? 1 : 0);
		if (!has) continue;
		capi_params p;
		st = status(nixl_capi_query_resp_list_get_params(resp, i, &p));
		if (st != ST_SUCCESS) break;
		st = enc_params(&e, p);
		nixl_capi_destroy_params(p);
	}
	nixl_capi_destroy_query_resp_list(resp);
	return enc_finish(&e, st, out);
}

static int do_partial_md(capi_agent a, capi_reg_dlist l, capi_opt_args o, void *arg) {
	nixlgo_buf *out = arg;
	void *data = NULL;
	size_t len = 0;
	int st = status(nixl_capi_get_local_partial_md(a, l, &data, &len, o));
	if (st == ST_SUCCESS) put_blob(data, len, out);
	return st;
}

int nixlgo_register_mem(uintptr_t agent, int mem, const nixlgo_reg_desc *descs, size_t n,
                        const char *meta, size_t meta_len, nixlgo_opts opts) {
	return with_reg(agent, mem, descs, n, meta, meta_len, &opts, do_register, NULL);
}

int nixlgo_deregister_mem(uintptr_t agent, int mem, const nixlgo_reg_desc *descs, size_t n,
                          const char *meta, size_t meta_len, nixlgo_opts opts) {
	return with_reg(agent, mem, descs, n, meta, meta_len, &opts, do_deregister, NULL);
}

int nixlgo_query_mem(uintptr_t agent, int mem, const nixlgo_reg_desc *descs, size_t n,
                     const char *meta, size_t meta_len, nixlgo_opts opts, nixlgo_buf *out) {
	out->data = NULL;
	out->len = 0;
	return with_reg(agent, mem, descs, n, meta, meta_len, &opts, do_query, out);
}

/* Metadata. */

int nixlgo_get_local_md(uintptr_t agent, nixlgo_buf *out) {
	out->data = NULL;
	out->len = 0;
	void *data = NULL;
	size_t len = 0;
	int st = status(nixl_capi_get_local_md(agentOf(agent)->capi, &data, &len));
	if (st == ST_SUCCESS) put_blob(data, len, out);
	return st;
}

int nixlgo_get_local_partial_md(uintptr_t agent, int mem, const nixlgo_reg_desc *descs, size_t n,
                                const char *meta, size_t meta_len, nixlgo_opts opts,
                                nixlgo_buf *out) {
	out->data = NULL;
	out->len = 0;
	return with_reg(agent, mem, descs, n, meta, meta_len, &opts, do_partial_md, out);
}

int nixlgo_load_remote_md(uintptr_t agent, const char *md, size_t md_len, nixlgo_buf *name) {
	name->data = NULL;
	name->len = 0;
	/* The C API refuses an empty blob as an invalid parameter. */
	if (md_len == 0) return ST_INVALID_PARAM;
	char *remote = NULL;
	int st = status(nixl_capi_load_remote_md(agentOf(agent)->capi, md, md_len, &remote));
	if (st != ST_SUCCESS) return st;
	size_t n = strlen(remote);
	put_blob(remote, n, name);
	return ST_SUCCESS;
}

int nixlgo_invalidate_remote_md(uintptr_t agent, const char *remote, size_t remote_len) {
	int st = ST_SUCCESS;
	char *r = cstr(remote, remote_len, &st);
	if (r == NULL) return st;
	st = status(nixl_capi_invalidate_remote_md(agentOf(agent)->capi, r));
	free(r);
	return st;
}

int nixlgo_check_remote_md(uintptr_t agent, const char *remote, size_t remote_len, int mem,
                           const nixlgo_desc *descs, size_t n) {
	capi_xfer_dlist l;
	int st = xfer_list(mem, descs, n, &l);
	if (st != ST_SUCCESS) return st;
	remote_call c;
	st = remote_call_new(&no_opts, remote, remote_len, &c);
	if (st == ST_SUCCESS) {
		st = status(nixl_capi_check_remote_md(agentOf(agent)->capi, c.remote, l));
		remote_call_free(&c);
	}
	nixl_capi_destroy_xfer_dlist(l);
	return st;
}

int nixlgo_send_local_md(uintptr_t agent, nixlgo_opts opts) {
	capi_opt_args args;
	int st = opts_new(&opts, &args);
	if (st != ST_SUCCESS) return st;
	st = status(nixl_capi_send_local_md(agentOf(agent)->capi, args));
	opts_free(args);
	return st;
}

int nixlgo_send_local_partial_md(uintptr_t agent, int mem, const nixlgo_reg_desc *descs, size_t n,
                                 const char *meta, size_t meta_len, nixlgo_opts opts) {
	return with_reg(agent, mem, descs, n, meta, meta_len, &opts, do_send_partial, NULL);
}

int nixlgo_fetch_remote_md(uintptr_t agent, const char *remote, size_t remote_len,
                           nixlgo_opts opts) {
	remote_call c;
	int st = remote_call_new(&opts, remote, remote_len, &c);
	if (st != ST_SUCCESS) return st;
	st = status(nixl_capi_fetch_remote_md(agentOf(agent)->capi, c.remote, c.args));
	remote_call_free(&c);
	return st;
}

int nixlgo_invalidate_local_md(uintptr_t agent, nixlgo_opts opts) {
	capi_opt_args args;
	int st = opts_new(&opts, &args);
	if (st != ST_SUCCESS) return st;
	st = status(nixl_capi_invalidate_local_md(agentOf(agent)->capi, args));
	opts_free(args);
	return st;
}

int nixlgo_make_connection(uintptr_t agent, const char *remote, size_t remote_len,
                           nixlgo_opts opts) {
	remote_call c;
	int st = remote_call_new(&opts, remote, remote_len, &c);
	if (st != ST_SUCCESS) return st;
	st = status(nixl_capi_agent_make_connection(agentOf(agent)->capi, c.remote, c.args));
	remote_call_free(&c);
	return st;
}

/* Transfers. */

int nixlgo_prep_xfer_dlist(uintptr_t agent, const char *remote, size_t remote_len, int mem,
                           const nixlgo_desc *descs, size_t n, nixlgo_opts opts,
                           uintptr_t *dlist) {
	capi_xfer_dlist l;
	int st = xfer_list(mem, descs, n, &l);
	if (st != ST_SUCCESS) return st;
	/* An empty name is NIXL_INIT_AGENT: the local agent's list. */
	remote_call c;
	st = remote_call_new(&opts, remote, remote_len, &c);
	if (st == ST_SUCCESS) {
		capi_dlist_handle h = NULL;
		st = status(nixl_capi_prep_xfer_dlist(agentOf(agent)->capi, c.remote, l, &h, c.args));
		if (st == ST_SUCCESS) *dlist = (uintptr_t)h;
		remote_call_free(&c);
	}
	nixl_capi_destroy_xfer_dlist(l);
	return st;
}

int nixlgo_release_dlist(uintptr_t agent, uintptr_t dlist) {
	return status(
	    nixl_capi_release_xfer_dlist_handle(agentOf(agent)->capi, (capi_dlist_handle)dlist));
}

int nixlgo_make_xfer_req(uintptr_t agent, int op, uintptr_t local, const int *local_idx,
                         size_t n_local, uintptr_t remote, const int *remote_idx, size_t n_remote,
                         nixlgo_opts opts, uintptr_t *req) {
	capi_opt_args args;
	int st = opts_new(&opts, &args);
	if (st != ST_SUCCESS) return st;
	/* The C API builds spans over the index arrays; an empty one needs no
	 * memory, but a NULL data pointer is kept out of it all the same. */
	static const int none[1] = {0};
	capi_xfer_req h = NULL;
	st = status(nixl_capi_make_xfer_req(agentOf(agent)->capi, op, (capi_dlist_handle)local,
	                                    n_local ? local_idx : none, n_local,
	                                    (capi_dlist_handle)remote, n_remote ? remote_idx : none,
	                                    n_remote, &h, args));
	opts_free(args);
	if (st == ST_SUCCESS) *req = (uintptr_t)h;
	return st;
}

int nixlgo_create_xfer_req(uintptr_t agent, int op, int local_mem, const nixlgo_desc *local,
                           size_t n_local, int remote_mem, const nixlgo_desc *remote,
                           size_t n_remote, const char *remote_agent, size_t remote_agent_len,
                           nixlgo_opts opts, uintptr_t *req) {
	capi_xfer_dlist ll, rl;
	int st = xfer_list(local_mem, local, n_local, &ll);
	if (st != ST_SUCCESS) return st;
	st = xfer_list(remote_mem, remote, n_remote, &rl);
	if (st != ST_SUCCESS) {
		nixl_capi_destroy_xfer_dlist(ll);
		return st;
	}
	remote_call c;
	st = remote_call_new(&opts, remote_agent, remote_agent_len, &c);
	if (st == ST_SUCCESS) {
		capi_xfer_req h = NULL;
		st = status(
		    nixl_capi_create_xfer_req(agentOf(agent)->capi, op, ll, rl, c.remote, &h, c.args));
		if (st == ST_SUCCESS) *req = (uintptr_t)h;
		remote_call_free(&c);
	}
	nixl_capi_destroy_xfer_dlist(ll);
	nixl_capi_destroy_xfer_dlist(rl);
	return st;
}

int nixlgo_create_post_xfer_req(uintptr_t agent, int op, int local_mem, const nixlgo_desc *local,
                                size_t n_local, int remote_mem, const nixlgo_desc *remote,
                                size_t n_remote, const char *remote_agent,
                                size_t remote_agent_len, nixlgo_opts opts, uintptr_t *req,
                                int *post, int *released) {
	*post = ST_SUCCESS;
	*released = ST_SUCCESS;
	*req = 0;
	uintptr_t h = 0;
	int s = nixlgo_create_xfer_req(agent, op, local_mem, local, n_local, remote_mem, remote, n_remote,
	                               remote_agent, remote_agent_len, opts, &h);
	if (s != ST_SUCCESS) return s;
	*req = h;
	*post = nixlgo_post_xfer_req_plain(agent, h);
	if (*post < 0) {
		*released = nixlgo_release_xfer_req(agent, h);
		if (*released == ST_SUCCESS) *req = 0;
	}
	return s;
}

int nixlgo_estimate_xfer_cost(uintptr_t agent, uintptr_t req, nixlgo_opts opts,
                              int64_t *duration_us, int64_t *err_margin_us, int *method) {
	*duration_us = 0;
	*err_margin_us = 0;
	*method = 0;
	capi_opt_args args;
	int st = opts_new(&opts, &args);
	if (st != ST_SUCCESS) return st;
	st = status(nixl_capi_estimate_xfer_cost(agentOf(agent)->capi, (capi_xfer_req)req, args,
	                                         duration_us, err_margin_us, method));
	opts_free(args);
	return st;
}

int nixlgo_post_xfer_req(uintptr_t agent, uintptr_t req, nixlgo_opts opts) {
	capi_opt_args args;
	int st = opts_new(&opts, &args);
	if (st != ST_SUCCESS) return st;
	st = status(nixl_capi_post_xfer_req(agentOf(agent)->capi, (capi_xfer_req)req, args));
	opts_free(args);
	return st;
}

int nixlgo_post_xfer_req_plain(uintptr_t agent, uintptr_t req) {
	return status(nixl_capi_post_xfer_req(agentOf(agent)->capi, (capi_xfer_req)req, NULL));
}

int nixlgo_get_xfer_status(uintptr_t agent, uintptr_t req) {
	return status(nixl_capi_get_xfer_status(agentOf(agent)->capi, (capi_xfer_req)req));
}

/* backend_of reads the backend a C API backend handle stands for. The
 * handle is a struct whose only member is the nixlBackendH pointer, in
 * NIXL 1.4.0 and 1.5.1 (src/bindings/rust/wrapper.cpp, struct
 * nixl_capi_backend_s); the C API has no call that compares two handles. */
static void *backend_of(capi_backend b) { return *(void *const *)b; }

int nixlgo_query_xfer_backend(uintptr_t agent, uintptr_t req, uintptr_t *backend) {
	agent_t *a = agentOf(agent);
	capi_backend b = NULL;
	int st = status(nixl_capi_query_xfer_backend(a->capi, (capi_xfer_req)req, &b));
	if (st != ST_SUCCESS) return st;
	/* A backend gonixl did not create is reported as 0, which Go names. */
	*backend = 0;
	pthread_mutex_lock(&a->mu);
	for (size_t i = 0; i < a->n_backends; i++)
		if (backend_of(a->backends[i]) == backend_of(b)) *backend = (uintptr_t)a->backends[i];
	pthread_mutex_unlock(&a->mu);
	nixl_capi_destroy_backend(b);
	return ST_SUCCESS;
}

int nixlgo_get_xfer_telemetry(uintptr_t agent, uintptr_t req, nixlgo_telemetry *out) {
	capi_telemetry t = {0};
	int st = status(nixl_capi_get_xfer_telemetry(agentOf(agent)->capi, (capi_xfer_req)req, &t));
	if (st != ST_SUCCESS) return st;
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	int64_t now_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
	out->start_age_ns = now_ns - (int64_t)t.start_time_us * 1000;
	out->post_us = (int64_t)t.post_duration_us;
	out->xfer_us = (int64_t)t.xfer_duration_us;
	out->total_bytes = t.total_bytes;
	out->desc_count = t.desc_count;
	return ST_SUCCESS;
}

int nixlgo_release_xfer_req(uintptr_t agent, uintptr_t req) {
	capi_xfer_req r = (capi_xfer_req)req;
	int st = status(nixl_capi_release_xfer_req(agentOf(agent)->capi, r));
	/* A request that NIXL would not release stays live, handle and all. */
	if (st == ST_SUCCESS) nixl_capi_destroy_xfer_req(r);
	return st;
}

void nixlgo_release_xfer_reqs(uintptr_t agent, const uintptr_t *reqs, int32_t *statuses, size_t n) {
	for (size_t i = 0; i < n; i++) statuses[i] = nixlgo_release_xfer_req(agent, reqs[i]);
}

/* Notifications. */

uintptr_t nixlgo_notifs_map_new(void) {
	capi_notif_map m = NULL;
	if (nixl_capi_create_notif_map(&m) != CAPI_SUCCESS) return 0;
	return (uintptr_t)m;
}

void nixlgo_notifs_map_free(uintptr_t notifs_map) {
	nixl_capi_destroy_notif_map((capi_notif_map)notifs_map);
}

/* list_notifs lists what map holds as nixlgo_notif entries pointing into
 * its strings, in scratch when they fit, else in a malloc'd array, a
 * sender's messages consecutive and in the order sent. */
static int list_notifs(capi_notif_map map, uintptr_t scratch, size_t scratch_cap,
                       nixlgo_notifs_result *r) {
	size_t agents = 0, n = 0;
	int st = status(nixl_capi_notif_map_size(map, &agents));
	for (size_t i = 0; i < agents && st == ST_SUCCESS; i++) {
		const char *from;
		size_t k = 0;
		st = status(nixl_capi_notif_map_get_agent_at(map, i, &from));
		if (st == ST_SUCCESS) st = status(nixl_capi_notif_map_get_notifs_size(map, from, &k));
		n += k;
	}
	if (st != ST_SUCCESS || n == 0) return st;
	nixlgo_notif *dst = (nixlgo_notif *)scratch;
	if (dst == NULL || n > scratch_cap / sizeof(nixlgo_notif)) {
		dst = malloc(n * sizeof(nixlgo_notif));
		if (dst == NULL) return ST_UNKNOWN;
	}
	size_t at = 0;
	for (size_t i = 0; i < agents && st == ST_SUCCESS; i++) {
		const char *from;
		size_t k = 0;
		st = status(nixl_capi_notif_map_get_agent_at(map, i, &from));
		if (st == ST_SUCCESS) st = status(nixl_capi_notif_map_get_notifs_size(map, from, &k));
		size_t from_len = st == ST_SUCCESS ? strlen(from) : 0;
		for (size_t j = 0; j < k && st == ST_SUCCESS && at < n; j++) {
			const void *msg;
			size_t len;
			st = status(nixl_capi_notif_map_get_notif(map, from, j, &msg, &len));
			if (st == ST_SUCCESS)
				dst[at++] = (nixlgo_notif){from, from_len, msg, len};
		}
	}
	if (st != ST_SUCCESS) {
		if ((uintptr_t)dst != scratch) free(dst);
		return st;
	}
	r->notifs = dst;
	r->n = at;
	return ST_SUCCESS;
}

/* get_notifs calls getNotifs with the caller's map, cleared first, and lists
 * what arrived into r. getNotifs may fail for one backend and still return
 * what the others delivered, so the notifications are listed whatever the
 * status; a failure to list them wins over getNotifs' status. */
static int get_notifs(capi_agent a, capi_opt_args args, uintptr_t scratch, size_t scratch_cap,
                      uintptr_t notifs_map, nixlgo_notifs_result *r) {
	if (notifs_map == 0) return ST_INVALID_PARAM;
	capi_notif_map m = (capi_notif_map)notifs_map;
	int st = status(nixl_capi_notif_map_clear(m));
	if (st != ST_SUCCESS) return st;
	st = status(nixl_capi_get_notifs(a, m, args));
	int listed = list_notifs(m, scratch, scratch_cap, r);
	return listed != ST_SUCCESS ? listed : st;
}

nixlgo_notifs_result nixlgo_get_notifs(uintptr_t agent, nixlgo_opts opts, uintptr_t scratch,
                                       size_t scratch_cap, uintptr_t notifs_map) {
	nixlgo_notifs_result r = {0, NULL, 0};
	capi_opt_args args;
	r.status = opts_new(&opts, &args);
	if (r.status != ST_SUCCESS) return r;
	r.status = get_notifs(agentOf(agent)->capi, args, scratch, scratch_cap, notifs_map, &r);
	opts_free(args);
	return r;
}

nixlgo_notifs_result nixlgo_poll(uintptr_t agent, const uintptr_t *reqs, int32_t *statuses, size_t n,
                                 int want_notifs, uintptr_t scratch, size_t scratch_cap,
                                 uintptr_t notifs_map) {
	nixlgo_notifs_result r = {0, NULL, 0};
	capi_agent a = agentOf(agent)->capi;
	for (size_t i = 0; i < n; i++)
		statuses[i] = status(nixl_capi_get_xfer_status(a, (capi_xfer_req)reqs[i]));
	if (!want_notifs) return r;
	r.status = get_notifs(a, NULL, scratch, scratch_cap, notifs_map, &r);
	return r;
}

int nixlgo_noop(int x) { return x; }

int nixlgo_gen_notif(uintptr_t agent, const char *remote, size_t remote_len, const char *msg,
                     size_t msg_len, nixlgo_opts opts) {
	remote_call c;
	int st = remote_call_new(&opts, remote, remote_len, &c);
	if (st != ST_SUCCESS) return st;
	st = status(
	    nixl_capi_gen_notif(agentOf(agent)->capi, c.remote, msg_len ? msg : "", msg_len, c.args));
	remote_call_free(&c);
	return st;
}

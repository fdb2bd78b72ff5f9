//go:build nixl && nixlcxx

// gonixl's extern "C" shim over nixlAgent. See shim.h for the rules every
// entry point follows. Nothing here keeps a pointer it was given: descriptor
// arrays, strings and options are copied into NIXL's own C++ types before
// the agent is called.

#include "shim.h"

// Without NIXL's headers the compiler would stop at "nixl.h: No such file or
// directory", which names neither what is missing nor where the build looked.
// cgo_cxx_nixl.go's cgo preamble adds -I/opt/nvidia/nvda_nixl/include after the
// user's CGO_CXXFLAGS; nixl_missing_test.go checks this message.
#if defined(__has_include)
#if !__has_include(<nixl.h>)
#define GONIXL_NO_NIXL_H 1
#error "gonixl: -tags nixlcxx needs NIXL's C++ headers: nixl.h not found under /opt/nvidia/nvda_nixl/include (NIXL's default prefix, searched after CGO_CXXFLAGS). Install NIXL from source there, or point CGO_CXXFLAGS=-I$NIXL/include and CGO_LDFLAGS=-L$NIXL/lib... at your installation (docs/binding.md); without nixlcxx, -tags nixl needs only NIXL's libraries (its wheel has them)"
#endif
#endif

// With the header missing the rest of the file is skipped, so that the
// message above is the only error rather than the first of hundreds.
#ifndef GONIXL_NO_NIXL_H

#include <nixl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace {

// guard runs f and turns any C++ exception into NIXL_ERR_UNKNOWN, so that no
// exception ever unwinds into cgo (which would abort the Go process).
template <class F>
int guard(F &&f) noexcept {
	try {
		return static_cast<int>(f());
	} catch (...) {
		return static_cast<int>(NIXL_ERR_UNKNOWN);
	}
}

nixlAgent *agentOf(uintptr_t a) { return reinterpret_cast<nixlAgent *>(a); }

std::string str(const char *p, size_t n) { return n == 0 ? std::string() : std::string(p, n); }

// encoder builds the result buffers described in shim.h.
class encoder {
public:
	void u64(uint64_t v) {
		char b[8];
		for (int i = 0; i < 8; i++) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
		s_.append(b, 8);
	}
	void bytes(const std::string &v) {
		u64(v.size());
		s_.append(v);
	}
	void params(const nixl_b_params_t &p) {
		u64(p.size());
		for (const auto &kv : p) {
			bytes(kv.first);
			bytes(kv.second);
		}
	}
	void raw(const std::string &v) { s_.append(v); }
	// finish hands the bytes to out as one malloc'd block.
	nixl_status_t finish(nixlgo_buf *out) {
		out->data = nullptr;
		out->len = 0;
		if (s_.empty()) return NIXL_SUCCESS;
		char *p = static_cast<char *>(std::malloc(s_.size()));
		if (p == nullptr) throw std::bad_alloc();
		std::memcpy(p, s_.data(), s_.size());
		out->data = p;
		out->len = s_.size();
		return NIXL_SUCCESS;
	}

private:
	std::string s_;
};

// decoder reads the params encoding written by Go (see shim.h).
class decoder {
public:
	decoder(const char *p, size_t n) : p_(p), n_(n) {}
	bool u64(uint64_t &v) {
		if (n_ < 8) return false;
		v = 0;
		for (int i = 0; i < 8; i++) v |= static_cast<uint64_t>(static_cast<unsigned char>(p_[i])) << (8 * i);
		p_ += 8;
		n_ -= 8;
		return true;
	}
	bool bytes(std::string &v) {
		uint64_t l;
		if (!u64(l) || l > n_) return false;
		v.assign(p_, l);
		p_ += l;
		n_ -= l;
		return true;
	}
	bool params(nixl_b_params_t &p) {
		uint64_t count;
		if (!u64(count)) return false;
		for (uint64_t i = 0; i < count; i++) {
			std::string k, v;
			if (!bytes(k) || !bytes(v)) return false;
			p[k] = v;
		}
		return n_ == 0;
	}

private:
	const char *p_;
	size_t n_;
};

nixl_xfer_dlist_t xferList(int mem, const nixlgo_desc *d, size_t n) {
	nixl_xfer_dlist_t l(static_cast<nixl_mem_t>(mem));
	l.reserve(n);
	for (size_t i = 0; i < n; i++) l.addDesc(nixlBasicDesc(d[i].addr, d[i].len, d[i].dev_id));
	return l;
}

nixl_reg_dlist_t regList(int mem, const nixlgo_reg_desc *d, size_t n, const char *meta,
                         size_t meta_len) {
	nixl_reg_dlist_t l(static_cast<nixl_mem_t>(mem));
	l.reserve(n);
	for (size_t i = 0; i < n; i++) {
		std::string m;
		if (d[i].meta_len > 0) {
			if (d[i].meta_off > meta_len || d[i].meta_len > meta_len - d[i].meta_off)
				throw std::out_of_range("descriptor metadata outside the blob");
			m.assign(meta + d[i].meta_off, d[i].meta_len);
		}
		l.addDesc(nixlBlobDesc(d[i].addr, d[i].len, d[i].dev_id, m));
	}
	return l;
}

// optArgs copies the flattened options into args and returns &args, or
// nullptr when no options were given.
const nixl_opt_args_t *optArgs(const nixlgo_opts &o, nixl_opt_args_t &args) {
	if (!o.present) return nullptr;
	for (size_t i = 0; i < o.n_backends; i++)
		args.backends.push_back(reinterpret_cast<nixlBackendH *>(o.backends[i]));
	if (o.has_notif) args.notif = str(o.notif, o.notif_len);
	args.skipDescMerge = o.skip_desc_merge != 0;
	args.includeConnInfo = o.include_conn_info != 0;
	args.ipAddr = str(o.ip_addr, o.ip_addr_len);
	if (o.port != 0) args.port = o.port;
	args.metadataLabel = str(o.metadata_label, o.metadata_label_len);
	args.customParam = str(o.custom_param, o.custom_param_len);
	return &args;
}

// putMemsParams hands mems and params to out in the "mems+params" encoding.
nixl_status_t putMemsParams(const nixl_mem_list_t &mems, const nixl_b_params_t &params,
                            nixlgo_buf *out) {
	encoder e;
	e.u64(mems.size());
	for (auto m : mems) e.u64(static_cast<uint64_t>(m));
	e.params(params);
	return e.finish(out);
}

// putBlob hands the raw bytes of v to out.
nixl_status_t putBlob(const std::string &v, nixlgo_buf *out) {
	encoder e;
	e.raw(v);
	return e.finish(out);
}

}  // namespace

extern "C" {

int nixlgo_agent_new(const char *name, size_t name_len, nixlgo_config c, uintptr_t *agent) {
	return guard([&] {
		nixlAgentConfig cfg;
		cfg.useProgThread = c.use_prog_thread != 0;
		cfg.useListenThread = c.use_listen_thread != 0;
		cfg.listenPort = c.listen_port;
		cfg.syncMode = static_cast<nixl_thread_sync_t>(c.sync_mode);
		cfg.captureTelemetry = c.capture_telemetry != 0;
		cfg.pthrDelay = c.pthr_delay_us;
		cfg.lthrDelay = c.lthr_delay_us;
		cfg.etcdWatchTimeout = std::chrono::microseconds(c.etcd_watch_timeout_us);
		*agent = reinterpret_cast<uintptr_t>(new nixlAgent(str(name, name_len), cfg));
		return NIXL_SUCCESS;
	});
}

int nixlgo_agent_delete(uintptr_t agent) {
	return guard([&] {
		delete agentOf(agent);
		return NIXL_SUCCESS;
	});
}

int nixlgo_get_avail_plugins(uintptr_t agent, nixlgo_buf *out) {
	return guard([&] {
		std::vector<nixl_backend_t> plugins;
		nixl_status_t s = agentOf(agent)->getAvailPlugins(plugins);
		if (s != NIXL_SUCCESS) return s;
		encoder e;
		e.u64(plugins.size());
		for (const auto &p : plugins) e.bytes(p);
		return e.finish(out);
	});
}

int nixlgo_get_plugin_params(uintptr_t agent, const char *type, size_t type_len, nixlgo_buf *out) {
	return guard([&] {
		nixl_mem_list_t mems;
		nixl_b_params_t params;
		nixl_status_t s = agentOf(agent)->getPluginParams(str(type, type_len), mems, params);
		if (s != NIXL_SUCCESS) return s;
		return putMemsParams(mems, params, out);
	});
}

int nixlgo_create_backend(uintptr_t agent, const char *type, size_t type_len, const char *params,
                          size_t params_len, uintptr_t *backend) {
	return guard([&] {
		nixl_b_params_t p;
		decoder d(params, params_len);
		if (params_len > 0 && !d.params(p)) return NIXL_ERR_INVALID_PARAM;
		nixlBackendH *b = nullptr;
		nixl_status_t s = agentOf(agent)->createBackend(str(type, type_len), p, b);
		if (s == NIXL_SUCCESS) *backend = reinterpret_cast<uintptr_t>(b);
		return s;
	});
}

int nixlgo_get_backend_params(uintptr_t agent, uintptr_t backend, nixlgo_buf *out) {
	return guard([&] {
		nixl_mem_list_t mems;
		nixl_b_params_t params;
		nixl_status_t s = agentOf(agent)->getBackendParams(
		    reinterpret_cast<const nixlBackendH *>(backend), mems, params);
		if (s != NIXL_SUCCESS) return s;
		return putMemsParams(mems, params, out);
	});
}

int nixlgo_register_mem(uintptr_t agent, int mem, const nixlgo_reg_desc *descs, size_t n,
                        const char *meta, size_t meta_len, nixlgo_opts opts) {
	return guard([&] {
		nixl_opt_args_t args;
		return agentOf(agent)->registerMem(regList(mem, descs, n, meta, meta_len),
		                                   optArgs(opts, args));
	});
}

int nixlgo_deregister_mem(uintptr_t agent, int mem, const nixlgo_reg_desc *descs, size_t n,
                          const char *meta, size_t meta_len, nixlgo_opts opts) {
	return guard([&] {
		nixl_opt_args_t args;
		return agentOf(agent)->deregisterMem(regList(mem, descs, n, meta, meta_len),
		                                     optArgs(opts, args));
	});
}

int nixlgo_query_mem(uintptr_t agent, int mem, const nixlgo_reg_desc *descs, size_t n,
                     const char *meta, size_t meta_len, nixlgo_opts opts, nixlgo_buf *out) {
	return guard([&] {
		nixl_opt_args_t args;
		std::vector<nixl_query_resp_t> resp;
		nixl_status_t s = agentOf(agent)->queryMem(regList(mem, descs, n, meta, meta_len), resp,
		                                           optArgs(opts, args));
		if (s != NIXL_SUCCESS) return s;
		encoder e;
		e.u64(resp.size());
		for (const auto &r : resp) {
			e.u64(r.has_value() ? 1 : 0);
			if (r.has_value()) e.params(*r);
		}
		return e.finish(out);
	});
}

int nixlgo_get_local_md(uintptr_t agent, nixlgo_buf *out) {
	return guard([&] {
		nixl_blob_t md;
		nixl_status_t s = agentOf(agent)->getLocalMD(md);
		if (s != NIXL_SUCCESS) return s;
		return putBlob(md, out);
	});
}

int nixlgo_get_local_partial_md(uintptr_t agent, int mem, const nixlgo_reg_desc *descs, size_t n,
                                const char *meta, size_t meta_len, nixlgo_opts opts,
                                nixlgo_buf *out) {
	return guard([&] {
		nixl_opt_args_t args;
		nixl_blob_t md;
		nixl_status_t s = agentOf(agent)->getLocalPartialMD(
		    regList(mem, descs, n, meta, meta_len), md, optArgs(opts, args));
		if (s != NIXL_SUCCESS) return s;
		return putBlob(md, out);
	});
}

int nixlgo_load_remote_md(uintptr_t agent, const char *md, size_t md_len, nixlgo_buf *name) {
	return guard([&] {
		std::string remote;
		nixl_status_t s = agentOf(agent)->loadRemoteMD(str(md, md_len), remote);
		if (s != NIXL_SUCCESS) return s;
		return putBlob(remote, name);
	});
}

int nixlgo_invalidate_remote_md(uintptr_t agent, const char *remote, size_t remote_len) {
	return guard([&] { return agentOf(agent)->invalidateRemoteMD(str(remote, remote_len)); });
}

int nixlgo_check_remote_md(uintptr_t agent, const char *remote, size_t remote_len, int mem,
                           const nixlgo_desc *descs, size_t n) {
	return guard([&] {
		return agentOf(agent)->checkRemoteMD(str(remote, remote_len), xferList(mem, descs, n));
	});
}

int nixlgo_send_local_md(uintptr_t agent, nixlgo_opts opts) {
	return guard([&] {
		nixl_opt_args_t args;
		return agentOf(agent)->sendLocalMD(optArgs(opts, args));
	});
}

int nixlgo_send_local_partial_md(uintptr_t agent, int mem, const nixlgo_reg_desc *descs, size_t n,
                                 const char *meta, size_t meta_len, nixlgo_opts opts) {
	return guard([&] {
		nixl_opt_args_t args;
		return agentOf(agent)->sendLocalPartialMD(regList(mem, descs, n, meta, meta_len),
		                                          optArgs(opts, args));
	});
}

int nixlgo_fetch_remote_md(uintptr_t agent, const char *remote, size_t remote_len,
                           nixlgo_opts opts) {
	return guard([&] {
		nixl_opt_args_t args;
		return agentOf(agent)->fetchRemoteMD(str(remote, remote_len), optArgs(opts, args));
	});
}

int nixlgo_invalidate_local_md(uintptr_t agent, nixlgo_opts opts) {
	return guard([&] {
		nixl_opt_args_t args;
		return agentOf(agent)->invalidateLocalMD(optArgs(opts, args));
	});
}

int nixlgo_make_connection(uintptr_t agent, const char *remote, size_t remote_len,
                           nixlgo_opts opts) {
	return guard([&] {
		nixl_opt_args_t args;
		return agentOf(agent)->makeConnection(str(remote, remote_len), optArgs(opts, args));
	});
}

int nixlgo_prep_xfer_dlist(uintptr_t agent, const char *remote, size_t remote_len, int mem,
                           const nixlgo_desc *descs, size_t n, nixlgo_opts opts,
                           uintptr_t *dlist) {
	return guard([&] {
		nixl_opt_args_t args;
		nixlDlistH *h = nullptr;
		nixl_status_t s = agentOf(agent)->prepXferDlist(str(remote, remote_len),
		                                                xferList(mem, descs, n), h,
		                                                optArgs(opts, args));
		if (s == NIXL_SUCCESS) *dlist = reinterpret_cast<uintptr_t>(h);
		return s;
	});
}

int nixlgo_release_dlist(uintptr_t agent, uintptr_t dlist) {
	return guard(
	    [&] { return agentOf(agent)->releasedDlistH(reinterpret_cast<nixlDlistH *>(dlist)); });
}

int nixlgo_make_xfer_req(uintptr_t agent, int op, uintptr_t local, const int *local_idx,
                         size_t n_local, uintptr_t remote, const int *remote_idx, size_t n_remote,
                         nixlgo_opts opts, uintptr_t *req) {
	return guard([&] {
		nixl_opt_args_t args;
		std::vector<int> li(local_idx, local_idx + n_local);
		std::vector<int> ri(remote_idx, remote_idx + n_remote);
		nixlXferReqH *h = nullptr;
		nixl_status_t s = agentOf(agent)->makeXferReq(
		    static_cast<nixl_xfer_op_t>(op), reinterpret_cast<const nixlDlistH *>(local), li,
		    reinterpret_cast<const nixlDlistH *>(remote), ri, h, optArgs(opts, args));
		if (s == NIXL_SUCCESS) *req = reinterpret_cast<uintptr_t>(h);
		return s;
	});
}

int nixlgo_create_xfer_req(uintptr_t agent, int op, int local_mem, const nixlgo_desc *local,
                           size_t n_local, int remote_mem, const nixlgo_desc *remote,
                           size_t n_remote, const char *remote_agent, size_t remote_agent_len,
                           nixlgo_opts opts, uintptr_t *req) {
	return guard([&] {
		nixl_opt_args_t args;
		nixlXferReqH *h = nullptr;
		nixl_status_t s = agentOf(agent)->createXferReq(
		    static_cast<nixl_xfer_op_t>(op), xferList(local_mem, local, n_local),
		    xferList(remote_mem, remote, n_remote), str(remote_agent, remote_agent_len), h,
		    optArgs(opts, args));
		if (s == NIXL_SUCCESS) *req = reinterpret_cast<uintptr_t>(h);
		return s;
	});
}

int nixlgo_create_post_xfer_req(uintptr_t agent, int op, int local_mem, const nixlgo_desc *local,
                                size_t n_local, int remote_mem, const nixlgo_desc *remote,
                                size_t n_remote, const char *remote_agent,
                                size_t remote_agent_len, nixlgo_opts opts, uintptr_t *req,
                                int *post, int *released) {
	*post = NIXL_SUCCESS;
	*released = NIXL_SUCCESS;
	*req = 0;
	uintptr_t h = 0;
	int s = nixlgo_create_xfer_req(agent, op, local_mem, local, n_local, remote_mem, remote, n_remote,
	                               remote_agent, remote_agent_len, opts, &h);
	if (s != NIXL_SUCCESS) return s;
	*req = h;
	*post = nixlgo_post_xfer_req_plain(agent, *req);
	if (*post < 0) {
		*released = nixlgo_release_xfer_req(agent, *req);
		if (*released == NIXL_SUCCESS) *req = 0;
	}
	return s;
}

int nixlgo_estimate_xfer_cost(uintptr_t agent, uintptr_t req, nixlgo_opts opts,
                              int64_t *duration_us, int64_t *err_margin_us, int *method) {
	return guard([&] {
		nixl_opt_args_t args;
		std::chrono::microseconds d{0}, m{0};
		nixl_cost_t how = nixl_cost_t::ANALYTICAL_BACKEND;
		nixl_status_t s = agentOf(agent)->estimateXferCost(
		    reinterpret_cast<const nixlXferReqH *>(req), d, m, how, optArgs(opts, args));
		*duration_us = d.count();
		*err_margin_us = m.count();
		*method = static_cast<int>(how);
		return s;
	});
}

int nixlgo_post_xfer_req(uintptr_t agent, uintptr_t req, nixlgo_opts opts) {
	return guard([&] {
		nixl_opt_args_t args;
		return agentOf(agent)->postXferReq(reinterpret_cast<nixlXferReqH *>(req),
		                                   optArgs(opts, args));
	});
}

int nixlgo_post_xfer_req_plain(uintptr_t agent, uintptr_t req) {
	return guard([&] { return agentOf(agent)->postXferReq(reinterpret_cast<nixlXferReqH *>(req)); });
}

int nixlgo_get_xfer_status(uintptr_t agent, uintptr_t req) {
	return guard(
	    [&] { return agentOf(agent)->getXferStatus(reinterpret_cast<nixlXferReqH *>(req)); });
}

int nixlgo_query_xfer_backend(uintptr_t agent, uintptr_t req, uintptr_t *backend) {
	return guard([&] {
		nixlBackendH *b = nullptr;
		nixl_status_t s =
		    agentOf(agent)->queryXferBackend(reinterpret_cast<const nixlXferReqH *>(req), b);
		if (s == NIXL_SUCCESS) *backend = reinterpret_cast<uintptr_t>(b);
		return s;
	});
}

int nixlgo_get_xfer_telemetry(uintptr_t agent, uintptr_t req, nixlgo_telemetry *out) {
	return guard([&] {
		nixl_xfer_telem_t t{};
		nixl_status_t s =
		    agentOf(agent)->getXferTelemetry(reinterpret_cast<const nixlXferReqH *>(req), t);
		if (s != NIXL_SUCCESS) return s;
		auto age = std::chrono::steady_clock::now() - t.startTime;
		out->start_age_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(age).count();
		out->post_us = t.postDuration.count();
		out->xfer_us = t.xferDuration.count();
		out->total_bytes = t.totalBytes;
		out->desc_count = t.descCount;
		return s;
	});
}

int nixlgo_release_xfer_req(uintptr_t agent, uintptr_t req) {
	return guard(
	    [&] { return agentOf(agent)->releaseXferReq(reinterpret_cast<nixlXferReqH *>(req)); });
}

void nixlgo_release_xfer_reqs(uintptr_t agent, const uintptr_t *reqs, int32_t *statuses, size_t n) {
	for (size_t i = 0; i < n; i++) statuses[i] = nixlgo_release_xfer_req(agent, reqs[i]);
}

// listNotifs lists notifs as nixlgo_notif entries pointing into its
// strings, in scratch when they fit, else in a malloc'd array, and points r
// at them.
void listNotifs(const nixl_notifs_t &notifs, uintptr_t scratch, size_t scratch_cap,
                nixlgo_notifs_result &r) {
	size_t n = 0;
	for (const auto &kv : notifs) n += kv.second.size();
	if (n == 0) return;
	nixlgo_notif *dst = reinterpret_cast<nixlgo_notif *>(scratch);
	if (dst == nullptr || n > scratch_cap / sizeof(nixlgo_notif)) {
		dst = static_cast<nixlgo_notif *>(std::malloc(n * sizeof(nixlgo_notif)));
		if (dst == nullptr) throw std::bad_alloc();
	}
	size_t i = 0;
	for (const auto &kv : notifs)
		for (const auto &m : kv.second) dst[i++] = {kv.first.data(), kv.first.size(), m.data(), m.size()};
	r.notifs = dst;
	r.n = n;
}

uintptr_t nixlgo_notifs_map_new(void) {
	try {
		return reinterpret_cast<uintptr_t>(new nixl_notifs_t());
	} catch (...) {
		return 0;
	}
}

void nixlgo_notifs_map_free(uintptr_t notifs_map) { delete reinterpret_cast<nixl_notifs_t *>(notifs_map); }

// getNotifsInto calls getNotifs with the caller's map and lists what
// arrived into r. getNotifs may fail for one backend and still return what
// the others delivered, so the notifications are listed whatever the
// status. Without a map the entries would point into a map gone at return.
nixl_status_t getNotifsInto(nixlAgent *a, const nixl_opt_args_t *args, uintptr_t scratch,
                            size_t scratch_cap, uintptr_t notifs_map, nixlgo_notifs_result &r) {
	if (notifs_map == 0) return NIXL_ERR_INVALID_PARAM;
	nixl_notifs_t &notifs = *reinterpret_cast<nixl_notifs_t *>(notifs_map);
	notifs.clear();
	nixl_status_t s = a->getNotifs(notifs, args);
	listNotifs(notifs, scratch, scratch_cap, r);
	return s;
}

nixlgo_notifs_result nixlgo_get_notifs(uintptr_t agent, nixlgo_opts opts, uintptr_t scratch,
                                       size_t scratch_cap, uintptr_t notifs_map) {
	nixlgo_notifs_result r{0, nullptr, 0};
	r.status = guard([&] {
		nixl_opt_args_t args;
		return getNotifsInto(agentOf(agent), optArgs(opts, args), scratch, scratch_cap, notifs_map, r);
	});
	return r;
}

nixlgo_notifs_result nixlgo_poll(uintptr_t agent, const uintptr_t *reqs, int32_t *statuses, size_t n,
                                 int want_notifs, uintptr_t scratch, size_t scratch_cap,
                                 uintptr_t notifs_map) {
	nixlgo_notifs_result r{0, nullptr, 0};
	nixlAgent *a = agentOf(agent);
	for (size_t i = 0; i < n; i++)
		statuses[i] = guard([&] { return a->getXferStatus(reinterpret_cast<nixlXferReqH *>(reqs[i])); });
	if (!want_notifs) return r;
	r.status = guard([&] { return getNotifsInto(a, nullptr, scratch, scratch_cap, notifs_map, r); });
	return r;
}

int nixlgo_noop(int x) { return x; }

int nixlgo_gen_notif(uintptr_t agent, const char *remote, size_t remote_len, const char *msg,
                     size_t msg_len, nixlgo_opts opts) {
	return guard([&] {
		nixl_opt_args_t args;
		return agentOf(agent)->genNotif(str(remote, remote_len), str(msg, msg_len),
		                                optArgs(opts, args));
	});
}

}  // extern "C"

#endif // GONIXL_NO_NIXL_H

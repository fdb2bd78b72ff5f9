//go:build nixl

package nixl

// This file is the whole cgo boundary: every other file of the native agent
// calls these Go functions, which take and return Go types only. Behind them
// is shim.h, implemented over NIXL's C API by capi.c (the default) or over
// its C++ agent by shim.cc (build tag nixlcxx); cgo_capi_nixl.go and
// cgo_cxx_nixl.go hold the flags that build and link each.
//
// Pointers handed to C point to Go memory that holds no Go pointers and are
// used by C for the duration of the call only (the shim copies what it keeps),
// which is what the cgo pointer rules allow and what lets the functions be
// declared noescape. C never calls back into Go (nocallback).

/*
#cgo noescape nixlgo_agent_new
#cgo noescape nixlgo_get_avail_plugins
#cgo noescape nixlgo_get_plugin_params
#cgo noescape nixlgo_create_backend
#cgo noescape nixlgo_get_backend_params
#cgo noescape nixlgo_register_mem
#cgo noescape nixlgo_deregister_mem
#cgo noescape nixlgo_query_mem
#cgo noescape nixlgo_get_local_md
#cgo noescape nixlgo_get_local_partial_md
#cgo noescape nixlgo_load_remote_md
#cgo noescape nixlgo_invalidate_remote_md
#cgo noescape nixlgo_check_remote_md
#cgo noescape nixlgo_send_local_md
#cgo noescape nixlgo_send_local_partial_md
#cgo noescape nixlgo_fetch_remote_md
#cgo noescape nixlgo_invalidate_local_md
#cgo noescape nixlgo_make_connection
#cgo noescape nixlgo_prep_xfer_dlist
#cgo noescape nixlgo_make_xfer_req
#cgo noescape nixlgo_create_xfer_req
#cgo noescape nixlgo_estimate_xfer_cost
#cgo noescape nixlgo_create_post_xfer_req
#cgo noescape nixlgo_post_xfer_req
#cgo noescape nixlgo_query_xfer_backend
#cgo noescape nixlgo_get_xfer_telemetry
#cgo noescape nixlgo_gen_notif
#cgo noescape nixlgo_get_notifs
#cgo noescape nixlgo_poll
#cgo noescape nixlgo_release_xfer_reqs

#cgo nocallback nixlgo_agent_new
#cgo nocallback nixlgo_agent_delete
#cgo nocallback nixlgo_get_avail_plugins
#cgo nocallback nixlgo_get_plugin_params
#cgo nocallback nixlgo_create_backend
#cgo nocallback nixlgo_get_backend_params
#cgo nocallback nixlgo_register_mem
#cgo nocallback nixlgo_deregister_mem
#cgo nocallback nixlgo_query_mem
#cgo nocallback nixlgo_get_local_md
#cgo nocallback nixlgo_get_local_partial_md
#cgo nocallback nixlgo_load_remote_md
#cgo nocallback nixlgo_invalidate_remote_md
#cgo nocallback nixlgo_check_remote_md
#cgo nocallback nixlgo_send_local_md
#cgo nocallback nixlgo_send_local_partial_md
#cgo nocallback nixlgo_fetch_remote_md
#cgo nocallback nixlgo_invalidate_local_md
#cgo nocallback nixlgo_make_connection
#cgo nocallback nixlgo_prep_xfer_dlist
#cgo nocallback nixlgo_release_dlist
#cgo nocallback nixlgo_make_xfer_req
#cgo nocallback nixlgo_create_xfer_req
#cgo nocallback nixlgo_estimate_xfer_cost
#cgo nocallback nixlgo_create_post_xfer_req
#cgo nocallback nixlgo_post_xfer_req
#cgo nocallback nixlgo_post_xfer_req_plain
#cgo nocallback nixlgo_get_xfer_status
#cgo nocallback nixlgo_query_xfer_backend
#cgo nocallback nixlgo_get_xfer_telemetry
#cgo nocallback nixlgo_release_xfer_req
#cgo nocallback nixlgo_release_xfer_reqs
#cgo nocallback nixlgo_get_notifs
#cgo nocallback nixlgo_gen_notif
#cgo nocallback nixlgo_poll
#cgo nocallback nixlgo_notifs_map_new
#cgo nocallback nixlgo_notifs_map_free
#cgo nocallback nixlgo_noop

#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"time"
	"unsafe"
)

// Desc has exactly the layout of nixlgo_desc, so transfer descriptor lists
// cross to C without a copy, and Status that of int32_t, so nixlgo_poll
// writes statuses straight into the caller's slice. These fail to compile if the layouts diverge.
var (
	_ = [1]struct{}{}[unsafe.Sizeof(Status(0))-unsafe.Sizeof(C.int32_t(0))]
	_ = [1]struct{}{}[unsafe.Sizeof(Desc{})-unsafe.Sizeof(C.nixlgo_desc{})]
	_ = [1]struct{}{}[unsafe.Offsetof(Desc{}.Len)-unsafe.Offsetof(C.nixlgo_desc{}.len)]
	_ = [1]struct{}{}[unsafe.Offsetof(Desc{}.DevID)-unsafe.Offsetof(C.nixlgo_desc{}.dev_id)]
	// notifRef is nixlgo_notif, so the shim's list is read in place.
	_ = [1]struct{}{}[unsafe.Sizeof(notifRef{})-unsafe.Sizeof(C.nixlgo_notif{})]
	_ = [1]struct{}{}[unsafe.Offsetof(notifRef{}.fromLen)-unsafe.Offsetof(C.nixlgo_notif{}.from_len)]
	_ = [1]struct{}{}[unsafe.Offsetof(notifRef{}.msg)-unsafe.Offsetof(C.nixlgo_notif{}.msg)]
	_ = [1]struct{}{}[unsafe.Offsetof(notifRef{}.msgLen)-unsafe.Offsetof(C.nixlgo_notif{}.msg_len)]
)

// shimOpts is nixl_opt_args_t after backend names were resolved to handles.
type shimOpts struct {
	present         bool
	backends        []uintptr
	hasNotif        bool
	notif           []byte
	skipDescMerge   bool
	includeConnInfo bool
	ipAddr          string
	port            int
	label           string
	custom          []byte
}

func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

func cStr(s string) (*C.char, C.size_t) {
	if len(s) == 0 {
		return nil, 0
	}
	return (*C.char)(unsafe.Pointer(unsafe.StringData(s))), C.size_t(len(s))
}

func cBytes(b []byte) (*C.char, C.size_t) {
	if len(b) == 0 {
		return nil, 0
	}
	return (*C.char)(unsafe.Pointer(unsafe.SliceData(b))), C.size_t(len(b))
}

func (o *shimOpts) c() C.nixlgo_opts {
	var c C.nixlgo_opts
	if o == nil || !o.present {
		return c
	}
	c.present = 1
	if len(o.backends) > 0 {
		c.backends = (*C.uintptr_t)(unsafe.Pointer(unsafe.SliceData(o.backends)))
		c.n_backends = C.size_t(len(o.backends))
	}
	c.has_notif = cBool(o.hasNotif)
	c.notif, c.notif_len = cBytes(o.notif)
	c.skip_desc_merge = cBool(o.skipDescMerge)
	c.include_conn_info = cBool(o.includeConnInfo)
	c.ip_addr, c.ip_addr_len = cStr(o.ipAddr)
	c.port = C.int(o.port)
	c.metadata_label, c.metadata_label_len = cStr(o.label)
	c.custom_param, c.custom_param_len = cBytes(o.custom)
	return c
}

func cDescs(d []Desc) (*C.nixlgo_desc, C.size_t) {
	if len(d) == 0 {
		return nil, 0
	}
	return (*C.nixlgo_desc)(unsafe.Pointer(unsafe.SliceData(d))), C.size_t(len(d))
}

// cRegList flattens a RegList into the arguments the shim's registration
// calls take: memory type, descriptors, and one blob holding every
// descriptor's metadata, which each descriptor locates by offset. Both
// arrays are Go memory without Go pointers, used by C for the call only.
func cRegList(l RegList) (C.int, *C.nixlgo_reg_desc, C.size_t, *C.char, C.size_t) {
	descs := make([]C.nixlgo_reg_desc, len(l.Descs))
	metaLen := 0
	for _, d := range l.Descs {
		metaLen += len(d.Meta)
	}
	var meta []byte
	if metaLen > 0 {
		meta = make([]byte, 0, metaLen)
	}
	for i, d := range l.Descs {
		descs[i] = C.nixlgo_reg_desc{
			addr:     C.uint64_t(d.Addr),
			len:      C.uint64_t(d.Len),
			dev_id:   C.uint64_t(d.DevID),
			meta_off: C.uint64_t(len(meta)),
			meta_len: C.uint64_t(len(d.Meta)),
		}
		meta = append(meta, d.Meta...)
	}
	var p *C.nixlgo_reg_desc
	if len(descs) > 0 {
		p = unsafe.SliceData(descs)
	}
	m, ml := cBytes(meta)
	return C.int(l.Mem), p, C.size_t(len(descs)), m, ml
}

// goBytes copies n bytes of C memory at p into a new Go slice.
func goBytes(p *C.char, n C.size_t) []byte {
	out := make([]byte, int(n))
	copy(out, unsafe.Slice((*byte)(unsafe.Pointer(p)), int(n)))
	return out
}

// takeBuf copies a result buffer to Go memory and frees the C copy.
func takeBuf(b C.nixlgo_buf) []byte {
	if b.data == nil {
		return nil
	}
	out := goBytes(b.data, b.len)
	C.free(unsafe.Pointer(b.data))
	return out
}

func shimAgentNew(name string, cfg Config) (uintptr, Status) {
	c := C.nixlgo_config{
		use_prog_thread:       cBool(cfg.ProgressThread),
		use_listen_thread:     cBool(cfg.ListenThread),
		listen_port:           C.uint16_t(cfg.ListenPort),
		sync_mode:             C.int(cfg.SyncMode),
		capture_telemetry:     cBool(cfg.CaptureTelemetry),
		pthr_delay_us:         C.uint64_t(cfg.ProgressThreadDelay / time.Microsecond),
		lthr_delay_us:         C.uint64_t(cfg.ListenThreadDelay / time.Microsecond),
		etcd_watch_timeout_us: C.uint64_t(cfg.EtcdWatchTimeout / time.Microsecond),
	}
	n, nl := cStr(name)
	var agent C.uintptr_t
	s := C.nixlgo_agent_new(n, nl, c, &agent)
	return uintptr(agent), Status(s)
}

func shimAgentDelete(agent uintptr) Status {
	return Status(C.nixlgo_agent_delete(C.uintptr_t(agent)))
}

func shimAvailPlugins(agent uintptr) ([]byte, Status) {
	var out C.nixlgo_buf
	s := C.nixlgo_get_avail_plugins(C.uintptr_t(agent), &out)
	return takeBuf(out), Status(s)
}

func shimPluginParams(agent uintptr, plugin string) ([]byte, Status) {
	var out C.nixlgo_buf
	p, pl := cStr(plugin)
	s := C.nixlgo_get_plugin_params(C.uintptr_t(agent), p, pl, &out)
	return takeBuf(out), Status(s)
}

func shimCreateBackend(agent uintptr, plugin string, params []byte) (uintptr, Status) {
	p, pl := cStr(plugin)
	b, bl := cBytes(params)
	var backend C.uintptr_t
	s := C.nixlgo_create_backend(C.uintptr_t(agent), p, pl, b, bl, &backend)
	return uintptr(backend), Status(s)
}

func shimBackendParams(agent, backend uintptr) ([]byte, Status) {
	var out C.nixlgo_buf
	s := C.nixlgo_get_backend_params(C.uintptr_t(agent), C.uintptr_t(backend), &out)
	return takeBuf(out), Status(s)
}

func shimRegisterMem(agent uintptr, l RegList, o *shimOpts) Status {
	mem, d, n, m, ml := cRegList(l)
	return Status(C.nixlgo_register_mem(C.uintptr_t(agent), mem, d, n, m, ml, o.c()))
}

func shimDeregisterMem(agent uintptr, l RegList, o *shimOpts) Status {
	mem, d, n, m, ml := cRegList(l)
	return Status(C.nixlgo_deregister_mem(C.uintptr_t(agent), mem, d, n, m, ml, o.c()))
}

func shimQueryMem(agent uintptr, l RegList, o *shimOpts) ([]byte, Status) {
	mem, d, n, m, ml := cRegList(l)
	var out C.nixlgo_buf
	s := C.nixlgo_query_mem(C.uintptr_t(agent), mem, d, n, m, ml, o.c(), &out)
	return takeBuf(out), Status(s)
}

func shimLocalMD(agent uintptr) ([]byte, Status) {
	var out C.nixlgo_buf
	s := C.nixlgo_get_local_md(C.uintptr_t(agent), &out)
	return takeBuf(out), Status(s)
}

func shimLocalPartialMD(agent uintptr, l RegList, o *shimOpts) ([]byte, Status) {
	mem, d, n, m, ml := cRegList(l)
	var out C.nixlgo_buf
	s := C.nixlgo_get_local_partial_md(C.uintptr_t(agent), mem, d, n, m, ml, o.c(), &out)
	return takeBuf(out), Status(s)
}

func shimLoadRemoteMD(agent uintptr, md []byte) (string, Status) {
	p, pl := cBytes(md)
	var out C.nixlgo_buf
	s := C.nixlgo_load_remote_md(C.uintptr_t(agent), p, pl, &out)
	return string(takeBuf(out)), Status(s)
}

func shimInvalidateRemoteMD(agent uintptr, remote string) Status {
	r, rl := cStr(remote)
	return Status(C.nixlgo_invalidate_remote_md(C.uintptr_t(agent), r, rl))
}

func shimCheckRemoteMD(agent uintptr, remote string, l XferList) Status {
	r, rl := cStr(remote)
	d, n := cDescs(l.Descs)
	return Status(C.nixlgo_check_remote_md(C.uintptr_t(agent), r, rl, C.int(l.Mem), d, n))
}

func shimSendLocalMD(agent uintptr, o *shimOpts) Status {
	return Status(C.nixlgo_send_local_md(C.uintptr_t(agent), o.c()))
}

func shimSendLocalPartialMD(agent uintptr, l RegList, o *shimOpts) Status {
	mem, d, n, m, ml := cRegList(l)
	return Status(C.nixlgo_send_local_partial_md(C.uintptr_t(agent), mem, d, n, m, ml, o.c()))
}

func shimFetchRemoteMD(agent uintptr, remote string, o *shimOpts) Status {
	r, rl := cStr(remote)
	return Status(C.nixlgo_fetch_remote_md(C.uintptr_t(agent), r, rl, o.c()))
}

func shimInvalidateLocalMD(agent uintptr, o *shimOpts) Status {
	return Status(C.nixlgo_invalidate_local_md(C.uintptr_t(agent), o.c()))
}

func shimMakeConnection(agent uintptr, remote string, o *shimOpts) Status {
	r, rl := cStr(remote)
	return Status(C.nixlgo_make_connection(C.uintptr_t(agent), r, rl, o.c()))
}

func shimPrepXferDlist(agent uintptr, remote string, l XferList, o *shimOpts) (uintptr, Status) {
	r, rl := cStr(remote)
	d, n := cDescs(l.Descs)
	var dl C.uintptr_t
	s := C.nixlgo_prep_xfer_dlist(C.uintptr_t(agent), r, rl, C.int(l.Mem), d, n, o.c(), &dl)
	return uintptr(dl), Status(s)
}

func shimReleaseDlist(agent, dlist uintptr) Status {
	return Status(C.nixlgo_release_dlist(C.uintptr_t(agent), C.uintptr_t(dlist)))
}

func cInts(v []C.int) *C.int {
	if len(v) == 0 {
		return nil
	}
	return unsafe.SliceData(v)
}

func shimMakeXferReq(agent uintptr, op XferOp, local uintptr, localIdx []C.int, remote uintptr, remoteIdx []C.int, o *shimOpts) (uintptr, Status) {
	var req C.uintptr_t
	s := C.nixlgo_make_xfer_req(C.uintptr_t(agent), C.int(op),
		C.uintptr_t(local), cInts(localIdx), C.size_t(len(localIdx)),
		C.uintptr_t(remote), cInts(remoteIdx), C.size_t(len(remoteIdx)),
		o.c(), &req)
	return uintptr(req), Status(s)
}

func shimCreateXferReq(agent uintptr, op XferOp, local, remote XferList, remoteAgent string, o *shimOpts) (uintptr, Status) {
	ld, ln := cDescs(local.Descs)
	rd, rn := cDescs(remote.Descs)
	ra, ral := cStr(remoteAgent)
	var req C.uintptr_t
	s := C.nixlgo_create_xfer_req(C.uintptr_t(agent), C.int(op),
		C.int(local.Mem), ld, ln, C.int(remote.Mem), rd, rn, ra, ral, o.c(), &req)
	return uintptr(req), Status(s)
}

// shimCreatePostXferReq is shimCreateXferReq then shimPostXferReqPlain,
// then, if the post failed, shimReleaseXferReq, in one crossing. req is
// the request while it is live (0 once released or never made).
func shimCreatePostXferReq(agent uintptr, op XferOp, local, remote XferList, remoteAgent string, o *shimOpts) (req uintptr, create, post, released Status) {
	ld, ln := cDescs(local.Descs)
	rd, rn := cDescs(remote.Descs)
	ra, ral := cStr(remoteAgent)
	var r C.uintptr_t
	var p, rel C.int
	s := C.nixlgo_create_post_xfer_req(C.uintptr_t(agent), C.int(op),
		C.int(local.Mem), ld, ln, C.int(remote.Mem), rd, rn, ra, ral, o.c(), &r, &p, &rel)
	return uintptr(r), Status(s), Status(p), Status(rel)
}

func shimEstimateXferCost(agent, req uintptr, o *shimOpts) (XferCost, Status) {
	var dur, margin C.int64_t
	var method C.int
	s := C.nixlgo_estimate_xfer_cost(C.uintptr_t(agent), C.uintptr_t(req), o.c(), &dur, &margin, &method)
	return XferCost{
		Duration:  time.Duration(dur) * time.Microsecond,
		ErrMargin: time.Duration(margin) * time.Microsecond,
		Method:    CostMethod(method),
	}, Status(s)
}

func shimPostXferReq(agent, req uintptr, o *shimOpts) Status {
	return Status(C.nixlgo_post_xfer_req(C.uintptr_t(agent), C.uintptr_t(req), o.c()))
}

// shimPostXferReqPlain is shimPostXferReq without options, through an
// entry point that takes none: the common repost needs no nixlgo_opts
// built, copied and read.
func shimPostXferReqPlain(agent, req uintptr) Status {
	return Status(C.nixlgo_post_xfer_req_plain(C.uintptr_t(agent), C.uintptr_t(req)))
}

func shimXferStatus(agent, req uintptr) Status {
	return Status(C.nixlgo_get_xfer_status(C.uintptr_t(agent), C.uintptr_t(req)))
}

func shimQueryXferBackend(agent, req uintptr) (uintptr, Status) {
	var b C.uintptr_t
	s := C.nixlgo_query_xfer_backend(C.uintptr_t(agent), C.uintptr_t(req), &b)
	return uintptr(b), Status(s)
}

func shimXferTelemetry(agent, req uintptr) (XferTelemetry, Status) {
	var t C.nixlgo_telemetry
	s := C.nixlgo_get_xfer_telemetry(C.uintptr_t(agent), C.uintptr_t(req), &t)
	if Status(s) != StatusSuccess {
		return XferTelemetry{}, Status(s)
	}
	return XferTelemetry{
		Start:        time.Now().Add(-time.Duration(t.start_age_ns)),
		PostDuration: time.Duration(t.post_us) * time.Microsecond,
		XferDuration: time.Duration(t.xfer_us) * time.Microsecond,
		TotalBytes:   uint64(t.total_bytes),
		DescCount:    uint64(t.desc_count),
	}, StatusSuccess
}

func shimReleaseXferReq(agent, req uintptr) Status {
	return Status(C.nixlgo_release_xfer_req(C.uintptr_t(agent), C.uintptr_t(req)))
}

// shimReleaseXferReqs releases reqs in one crossing, statuses[i] the
// result for reqs[i]; statuses must be as long as reqs.
func shimReleaseXferReqs(agent uintptr, reqs []uintptr, statuses []Status) {
	if len(reqs) == 0 {
		return
	}
	C.nixlgo_release_xfer_reqs(C.uintptr_t(agent), (*C.uintptr_t)(unsafe.Pointer(unsafe.SliceData(reqs))),
		(*C.int32_t)(unsafe.Pointer(unsafe.SliceData(statuses))), C.size_t(len(reqs)))
}

// notifScratch is what the notification calls reuse, so that polling
// needs no malloc and free in C: the nixl_notifs_t that getNotifs fills and
// a C buffer its list of entries is written into.
type notifScratch struct {
	ptr    unsafe.Pointer
	cap    int
	notifs uintptr // nixl_notifs_t*
}

// notifScratchSize is the scratch buffer's size: 2048 entries, past which
// a round's list is malloc'd. A variable so that a test can make that
// happen with a few notifications.
var notifScratchSize = 64 << 10

// newNotifScratch allocates the scratch; ok is false when C is out of memory.
func newNotifScratch() (s notifScratch, ok bool) {
	s = notifScratch{ptr: C.malloc(C.size_t(notifScratchSize)), cap: notifScratchSize, notifs: uintptr(C.nixlgo_notifs_map_new())}
	if s.ptr == nil || s.notifs == 0 {
		s.free()
		return notifScratch{}, false
	}
	return s, true
}

func (s *notifScratch) free() {
	if s.ptr != nil {
		C.free(s.ptr)
		s.ptr = nil
	}
	if s.notifs != 0 {
		C.nixlgo_notifs_map_free(C.uintptr_t(s.notifs))
		s.notifs = 0
	}
}

// cNotifs is a list of notifications still in C memory, valid until the
// next notifications call with the same scratch: in the scratch buffer, or,
// when it did not fit, in a malloc'd block (free) that release frees.
type cNotifs struct {
	refs []notifRef
	free unsafe.Pointer
}

func (c cNotifs) release() {
	if c.free != nil {
		C.free(c.free)
	}
}

// shimGetNotifs returns the notifications. The caller must not
// call it concurrently with the same scratch, and must release the result.
func shimGetNotifs(agent uintptr, o *shimOpts, scratch *notifScratch) (cNotifs, Status) {
	return viewNotifs(C.nixlgo_get_notifs(C.uintptr_t(agent), o.c(), C.uintptr_t(uintptr(scratch.ptr)), C.size_t(scratch.cap), C.uintptr_t(scratch.notifs)), scratch)
}

// shimPoll writes the status of each request of reqs (C pointers) to
// statuses, which must be as long, and, when wantNotifs is set, returns the
// notifications as shimGetNotifs does, all in one crossing.
// scratch is used, and may be nil, only when wantNotifs is set.
func shimPoll(agent uintptr, reqs []uintptr, statuses []Status, wantNotifs bool, scratch *notifScratch) (cNotifs, Status) {
	var rp *C.uintptr_t
	var sp *C.int32_t
	if len(reqs) > 0 {
		rp = (*C.uintptr_t)(unsafe.Pointer(unsafe.SliceData(reqs)))
		sp = (*C.int32_t)(unsafe.Pointer(unsafe.SliceData(statuses)))
	}
	if !wantNotifs {
		C.nixlgo_poll(C.uintptr_t(agent), rp, sp, C.size_t(len(reqs)), 0, 0, 0, 0)
		return cNotifs{}, StatusSuccess
	}
	return viewNotifs(C.nixlgo_poll(C.uintptr_t(agent), rp, sp, C.size_t(len(reqs)), 1,
		C.uintptr_t(uintptr(scratch.ptr)), C.size_t(scratch.cap), C.uintptr_t(scratch.notifs)), scratch)
}

// viewNotifs wraps a notifications result without copying it: Go reads
// the entries in place and copies out only the messages.
func viewNotifs(r C.nixlgo_notifs_result, scratch *notifScratch) (cNotifs, Status) {
	if r.notifs == nil {
		return cNotifs{}, Status(r.status)
	}
	c := cNotifs{refs: unsafe.Slice((*notifRef)(unsafe.Pointer(r.notifs)), int(r.n))}
	if unsafe.Pointer(r.notifs) != scratch.ptr {
		c.free = unsafe.Pointer(r.notifs)
	}
	return c, Status(r.status)
}

// shimNoop crosses into C and back doing nothing, with the cgo directives
// of every other call: what a crossing costs by itself.
func shimNoop(x int) int { return int(C.nixlgo_noop(C.int(x))) }

func shimGenNotif(agent uintptr, remote string, msg []byte, o *shimOpts) Status {
	r, rl := cStr(remote)
	m, ml := cBytes(msg)
	return Status(C.nixlgo_gen_notif(C.uintptr_t(agent), r, rl, m, ml, o.c()))
}

//go:build !nixl

package nixl

import "fmt"

// NativeAgent is the real NIXL agent. In this build (without the `nixl`
// build tag) it cannot be created: New returns ErrUnavailable, and every
// method returns ErrUnavailable too, so code that uses the native agent
// compiles in both builds.
type NativeAgent struct{}

// New would create a native NIXL agent; without the `nixl` build tag it
// returns an error matching ErrUnavailable that says how to get one.
func New(name string, cfg Config) (*NativeAgent, error) {
	return nil, fmt.Errorf("%w: rebuild with `-tags nixl` and NIXL installed: its Python wheel, with CGO_LDFLAGS from `go run github.com/gonixl/gonixl/nixl/cmd/nixl-flags`, or a source build in /opt/nvidia/nvda_nixl; agent %q not created", ErrUnavailable, name)
}

func unavailable(op string) error {
	return fmt.Errorf("%w: %s needs a build with `-tags nixl`", ErrUnavailable, op)
}

// Name returns "" in this build.
func (a *NativeAgent) Name() string { return "" }

// Config returns the zero Config in this build.
func (a *NativeAgent) Config() Config { return Config{} }

// AvailPlugins wraps nixlAgent::getAvailPlugins; unavailable in this build.
func (a *NativeAgent) AvailPlugins() ([]string, error) {
	return nil, unavailable("nixlAgent::getAvailPlugins")
}

// PluginParams wraps nixlAgent::getPluginParams; unavailable in this build.
func (a *NativeAgent) PluginParams(plugin string) ([]MemType, map[string]string, error) {
	return nil, nil, unavailable("nixlAgent::getPluginParams")
}

// CreateBackend wraps nixlAgent::createBackend; unavailable in this build.
func (a *NativeAgent) CreateBackend(plugin string, params map[string]string) error {
	return unavailable("nixlAgent::createBackend")
}

// BackendParams wraps nixlAgent::getBackendParams; unavailable in this build.
func (a *NativeAgent) BackendParams(backend string) ([]MemType, map[string]string, error) {
	return nil, nil, unavailable("nixlAgent::getBackendParams")
}

// RegisterMem wraps nixlAgent::registerMem; unavailable in this build.
func (a *NativeAgent) RegisterMem(descs RegList, opts *Options) error {
	return unavailable("nixlAgent::registerMem")
}

// DeregisterMem wraps nixlAgent::deregisterMem; unavailable in this build.
func (a *NativeAgent) DeregisterMem(descs RegList, opts *Options) error {
	return unavailable("nixlAgent::deregisterMem")
}

// QueryMem wraps nixlAgent::queryMem; unavailable in this build.
func (a *NativeAgent) QueryMem(descs RegList, opts *Options) ([]map[string]string, error) {
	return nil, unavailable("nixlAgent::queryMem")
}

// LocalMD wraps nixlAgent::getLocalMD; unavailable in this build.
func (a *NativeAgent) LocalMD() ([]byte, error) {
	return nil, unavailable("nixlAgent::getLocalMD")
}

// LocalPartialMD wraps nixlAgent::getLocalPartialMD; unavailable in this build.
func (a *NativeAgent) LocalPartialMD(descs RegList, opts *Options) ([]byte, error) {
	return nil, unavailable("nixlAgent::getLocalPartialMD")
}

// LoadRemoteMD wraps nixlAgent::loadRemoteMD; unavailable in this build.
func (a *NativeAgent) LoadRemoteMD(md []byte) (string, error) {
	return "", unavailable("nixlAgent::loadRemoteMD")
}

// InvalidateRemoteMD wraps nixlAgent::invalidateRemoteMD; unavailable in this build.
func (a *NativeAgent) InvalidateRemoteMD(remote string) error {
	return unavailable("nixlAgent::invalidateRemoteMD")
}

// CheckRemoteMD wraps nixlAgent::checkRemoteMD; unavailable in this build.
func (a *NativeAgent) CheckRemoteMD(remote string, descs XferList) error {
	return unavailable("nixlAgent::checkRemoteMD")
}

// SendLocalMD wraps nixlAgent::sendLocalMD; unavailable in this build.
func (a *NativeAgent) SendLocalMD(opts *Options) error {
	return unavailable("nixlAgent::sendLocalMD")
}

// SendLocalPartialMD wraps nixlAgent::sendLocalPartialMD; unavailable in this build.
func (a *NativeAgent) SendLocalPartialMD(descs RegList, opts *Options) error {
	return unavailable("nixlAgent::sendLocalPartialMD")
}

// FetchRemoteMD wraps nixlAgent::fetchRemoteMD; unavailable in this build.
func (a *NativeAgent) FetchRemoteMD(remote string, opts *Options) error {
	return unavailable("nixlAgent::fetchRemoteMD")
}

// InvalidateLocalMD wraps nixlAgent::invalidateLocalMD; unavailable in this build.
func (a *NativeAgent) InvalidateLocalMD(opts *Options) error {
	return unavailable("nixlAgent::invalidateLocalMD")
}

// MakeConnection wraps nixlAgent::makeConnection; unavailable in this build.
func (a *NativeAgent) MakeConnection(remote string, opts *Options) error {
	return unavailable("nixlAgent::makeConnection")
}

// PrepXferDlist wraps nixlAgent::prepXferDlist; unavailable in this build.
func (a *NativeAgent) PrepXferDlist(remote string, descs XferList, opts *Options) (DlistHandle, error) {
	return 0, unavailable("nixlAgent::prepXferDlist")
}

// ReleaseDlistHandle wraps nixlAgent::releasedDlistH; unavailable in this build.
func (a *NativeAgent) ReleaseDlistHandle(h DlistHandle) error {
	return unavailable("nixlAgent::releasedDlistH")
}

// MakeXferReq wraps nixlAgent::makeXferReq; unavailable in this build.
func (a *NativeAgent) MakeXferReq(op XferOp, local DlistHandle, localIdx []int, remote DlistHandle, remoteIdx []int, opts *Options) (XferHandle, error) {
	return 0, unavailable("nixlAgent::makeXferReq")
}

// CreateXferReq wraps nixlAgent::createXferReq; unavailable in this build.
func (a *NativeAgent) CreateXferReq(op XferOp, local, remote XferList, remoteAgent string, opts *Options) (XferHandle, error) {
	return 0, unavailable("nixlAgent::createXferReq")
}

// EstimateXferCost wraps nixlAgent::estimateXferCost; unavailable in this build.
func (a *NativeAgent) EstimateXferCost(req XferHandle, opts *Options) (XferCost, error) {
	return XferCost{}, unavailable("nixlAgent::estimateXferCost")
}

// PostXferReq wraps nixlAgent::postXferReq; unavailable in this build.
func (a *NativeAgent) PostXferReq(req XferHandle, opts *Options) (Status, error) {
	return StatusUnknown, unavailable("nixlAgent::postXferReq")
}

// XferStatus wraps nixlAgent::getXferStatus; unavailable in this build.
func (a *NativeAgent) XferStatus(req XferHandle) (Status, error) {
	return StatusUnknown, unavailable("nixlAgent::getXferStatus")
}

// QueryXferBackend wraps nixlAgent::queryXferBackend; unavailable in this build.
func (a *NativeAgent) QueryXferBackend(req XferHandle) (string, error) {
	return "", unavailable("nixlAgent::queryXferBackend")
}

// XferTelemetry wraps nixlAgent::getXferTelemetry; unavailable in this build.
func (a *NativeAgent) XferTelemetry(req XferHandle) (XferTelemetry, error) {
	return XferTelemetry{}, unavailable("nixlAgent::getXferTelemetry")
}

// ReleaseXferReq wraps nixlAgent::releaseXferReq; unavailable in this build.
func (a *NativeAgent) ReleaseXferReq(req XferHandle) error {
	return unavailable("nixlAgent::releaseXferReq")
}

// ReleaseXferReqs wraps nixlAgent::releaseXferReq for several requests;
// unavailable in this build.
func (a *NativeAgent) ReleaseXferReqs(reqs []XferHandle, errs []error) error {
	return unavailable("nixlAgent::releaseXferReq")
}

// GetNotifs wraps nixlAgent::getNotifs; unavailable in this build.
func (a *NativeAgent) GetNotifs(opts *Options) (Notifs, error) {
	return nil, unavailable("nixlAgent::getNotifs")
}

// AppendNotifs wraps nixlAgent::getNotifs; unavailable in this build.
func (a *NativeAgent) AppendNotifs(dst Notifs, opts *Options) (Notifs, error) {
	return dst, unavailable("nixlAgent::getNotifs")
}

// GenNotif wraps nixlAgent::genNotif; unavailable in this build.
func (a *NativeAgent) GenNotif(remote string, msg []byte, opts *Options) error {
	return unavailable("nixlAgent::genNotif")
}

// Close does nothing in this build.
func (a *NativeAgent) Close() error { return nil }

// Poll wraps nixlAgent::getXferStatus and nixlAgent::getNotifs in one call;
// unavailable in this build.
func (a *NativeAgent) Poll(reqs []XferHandle, statuses []Status, notifs Notifs) error {
	return unavailable(pollOp)
}

// PollEach wraps nixlAgent::getXferStatus and nixlAgent::getNotifs in one
// call; unavailable in this build.
func (a *NativeAgent) PollEach(reqs []XferHandle, statuses []Status, each func(from string, msg []byte)) error {
	return unavailable(pollOp)
}

// PostXfer wraps nixlAgent::createXferReq and nixlAgent::postXferReq in one
// call; unavailable in this build.
func (a *NativeAgent) PostXfer(op XferOp, local, remote XferList, remoteAgent string, opts *Options) (XferHandle, Status, error) {
	return 0, StatusUnknown, unavailable("nixlAgent::createXferReq")
}

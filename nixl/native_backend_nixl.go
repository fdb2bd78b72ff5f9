//go:build nixl

package nixl

import (
	"fmt"
	"sort"
)

// AvailPlugins lists the backend plugins NIXL found in its plugin directory
// (nixlAgent::getAvailPlugins), such as "UCX", "POSIX" or "LIBFABRIC". NIXL
// looks in $NIXL_PLUGIN_DIR, else in plugins/ next to libnixl.
func (a *NativeAgent) AvailPlugins() ([]string, error) {
	const op = "nixlAgent::getAvailPlugins"
	if err := a.enter(op); err != nil {
		return nil, err
	}
	defer a.exit()
	b, s := shimAvailPlugins(a.agent)
	if err := check(op, s, nil); err != nil {
		return nil, err
	}
	names, err := decodeStrings(b)
	if err != nil {
		return nil, malformed(op, err)
	}
	sort.Strings(names)
	return names, nil
}

// PluginParams returns the memory types a plugin supports and its
// initialisation parameters with their default values
// (nixlAgent::getPluginParams). An unknown plugin gives ErrNotFound.
func (a *NativeAgent) PluginParams(plugin string) ([]MemType, map[string]string, error) {
	const op = "nixlAgent::getPluginParams"
	if err := a.enter(op); err != nil {
		return nil, nil, err
	}
	defer a.exit()
	b, s := shimPluginParams(a.agent, plugin)
	if err := check(op, s, func() string { return fmt.Sprintf("plugin %q (see AvailPlugins)", plugin) }); err != nil {
		return nil, nil, err
	}
	mems, params, err := decodeMemsParams(b)
	if err != nil {
		return nil, nil, malformed(op, err)
	}
	return mems, params, nil
}

// CreateBackend instantiates the plugin named plugin on this agent with
// params (nixlAgent::createBackend); parameters left out take the plugin's
// defaults (see PluginParams). The backend is then known by the plugin's
// name, which is what Options.Backends and QueryXferBackend use; an agent
// has at most one backend per plugin.
//
// For UCX between agents on one host, params {"ucx_error_handling_mode":
// "none"} lets UCX use shared memory instead of TCP.
func (a *NativeAgent) CreateBackend(plugin string, params map[string]string) error {
	const op = "nixlAgent::createBackend"
	if err := a.enter(op); err != nil {
		return err
	}
	defer a.exit()
	a.bmu.Lock()
	defer a.bmu.Unlock()
	if _, dup := a.backends[plugin]; dup {
		return &Error{Op: op, Status: StatusInvalidParam, Msg: fmt.Sprintf("agent %q already has a %q backend", a.name, plugin)}
	}
	h, s := shimCreateBackend(a.agent, plugin, encodeParams(params))
	if err := check(op, s, func() string { return fmt.Sprintf("backend %q on agent %q", plugin, a.name) }); err != nil {
		return err
	}
	a.backends[plugin] = h
	return nil
}

// BackendParams returns the memory types a created backend supports and the
// full set of parameters it runs with, defaults included
// (nixlAgent::getBackendParams).
func (a *NativeAgent) BackendParams(backend string) ([]MemType, map[string]string, error) {
	const op = "nixlAgent::getBackendParams"
	if err := a.enter(op); err != nil {
		return nil, nil, err
	}
	defer a.exit()
	o, err := a.options(op, &Options{Backends: []string{backend}})
	if err != nil {
		return nil, nil, err
	}
	b, s := shimBackendParams(a.agent, o.backends[0])
	if err := check(op, s, func() string { return fmt.Sprintf("backend %q", backend) }); err != nil {
		return nil, nil, err
	}
	mems, params, err := decodeMemsParams(b)
	if err != nil {
		return nil, nil, malformed(op, err)
	}
	return mems, params, nil
}

// backendName maps a nixlBackendH* back to the name it was created with.
func (a *NativeAgent) backendName(h uintptr) (string, bool) {
	a.bmu.RLock()
	defer a.bmu.RUnlock()
	for name, b := range a.backends {
		if b == h {
			return name, true
		}
	}
	return "", false
}

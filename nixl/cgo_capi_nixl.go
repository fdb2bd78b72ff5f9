//go:build nixl && !nixlcxx

package nixl

// The default binding (capi.c) needs no NIXL headers: it declares the C API
// functions it calls (capi.h) and links NIXL's C API library, libnixl_capi,
// which brings libnixl and libnixl_build. NIXL's Python wheels ship it; so
// does a NIXL built from source. The prefix below is where a source build
// installs by default; flags in CGO_LDFLAGS (go run ./nixl/cmd/nixl-flags
// prints them for an installed wheel) are searched first.

/*
#cgo LDFLAGS: -L/opt/nvidia/nvda_nixl/lib/x86_64-linux-gnu -L/opt/nvidia/nvda_nixl/lib -L/opt/nvidia/nvda_nixl/lib64
#cgo LDFLAGS: -Wl,-rpath,/opt/nvidia/nvda_nixl/lib/x86_64-linux-gnu -Wl,-rpath,/opt/nvidia/nvda_nixl/lib -Wl,-rpath,/opt/nvidia/nvda_nixl/lib64
#cgo LDFLAGS: -lnixl_capi -lpthread
*/
import "C"

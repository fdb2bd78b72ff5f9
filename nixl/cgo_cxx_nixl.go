//go:build nixl && nixlcxx

package nixl

// With the build tag nixlcxx the binding is shim.cc, compiled against NIXL's
// C++ headers (nixl.h), which only a source build installs. It reports every
// status NIXL's agent returns, where the C API folds most failures into
// NIXL_ERR_BACKEND (docs/binding.md). Flags in CGO_CXXFLAGS and CGO_LDFLAGS
// are searched before the default prefix below.

/*
#cgo CXXFLAGS: -std=c++20 -I/opt/nvidia/nvda_nixl/include
#cgo LDFLAGS: -L/opt/nvidia/nvda_nixl/lib/x86_64-linux-gnu -L/opt/nvidia/nvda_nixl/lib -L/opt/nvidia/nvda_nixl/lib64
#cgo LDFLAGS: -Wl,-rpath,/opt/nvidia/nvda_nixl/lib/x86_64-linux-gnu -Wl,-rpath,/opt/nvidia/nvda_nixl/lib -Wl,-rpath,/opt/nvidia/nvda_nixl/lib64
#cgo LDFLAGS: -lnixl -lnixl_build -lstdc++
*/
import "C"

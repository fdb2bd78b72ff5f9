//go:build !cuda

package cuda

import (
	"errors"
	"unsafe"
)

// In this build there is no driver: drvLoad fails, so Init does, and the
// functions that reach the driver return before calling the others.

func drvLoad() error {
	return errors.New("built without the `cuda` build tag: rebuild with `-tags cuda` (and run where libcuda.so.1 is installed)")
}

const notBuilt = ErrorNotInitialized

func drvInit() Result                                  { return notBuilt }
func drvErrorString(Result) string                     { return "" }
func drvErrorName(Result) string                       { return "" }
func drvDeviceCount() (int, Result)                    { return 0, notBuilt }
func drvCanAccessPeer(a, b int) (bool, Result)         { return false, notBuilt }
func drvCtxRetain(int) (uintptr, int32, Result)        { return 0, 0, notBuilt }
func drvCtxRelease(int32) Result                       { return notBuilt }
func drvCtxSet(uintptr) Result                         { return notBuilt }
func drvCtxSync() Result                               { return notBuilt }
func drvCtxEnablePeer(uintptr) Result                  { return notBuilt }
func drvMemAlloc(uint64) (uint64, Result)              { return 0, notBuilt }
func drvMemFree(uint64) Result                         { return notBuilt }
func drvMemAllocHost(int) (unsafe.Pointer, Result)     { return nil, notBuilt }
func drvMemFreeHost(unsafe.Pointer) Result             { return notBuilt }
func drvMemcpyHtoD(uint64, unsafe.Pointer, int) Result { return notBuilt }
func drvMemcpyDtoH(unsafe.Pointer, uint64, int) Result { return notBuilt }
func drvMemcpyDtoD(_, _, _ uint64) Result              { return notBuilt }
func drvMemsetD8(uint64, byte, uint64) Result          { return notBuilt }
func drvMemcpyPeer(uint64, uintptr, uint64, uintptr, uint64) Result {
	return notBuilt
}
func drvMemcpyHtoDAsync(uint64, unsafe.Pointer, int, uintptr) Result { return notBuilt }
func drvModuleLoadData(string) (uintptr, Result)                     { return 0, notBuilt }
func drvModuleUnload(uintptr) Result                                 { return notBuilt }
func drvModuleGetFunction(uintptr, string) (uintptr, Result)         { return 0, notBuilt }
func drvFuncGetAttribute(uintptr, int) (int, Result)                 { return 0, notBuilt }
func drvStreamCreate(uint32) (uintptr, Result)                       { return 0, notBuilt }
func drvStreamDestroy(uintptr) Result                                { return notBuilt }
func drvStreamSynchronize(uintptr) Result                            { return notBuilt }
func drvStreamQuery(uintptr) Result                                  { return notBuilt }
func drvLaunchKernel(_ uintptr, _, _, _ uint32, _ uintptr, _ []uint64) Result {
	return notBuilt
}

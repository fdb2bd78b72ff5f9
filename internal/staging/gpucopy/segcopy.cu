// segcopy.cu: the gather/scatter kernels of gonixl's staging path, on one
// GPU: the gather packs a request's scattered KV blocks into a contiguous
// staging slot, the scatter unpacks a slot into the blocks.
// gonixl_copy_blocks takes the regions' bases and the block ids and computes
// every address itself (a few KiB uploaded per call);
// gonixl_copy_segments takes a list of segments (for geometries where
// blocks do not map one to one). One thread block copies one item at a time
// (grid-stride); 16-byte loads and stores when the item allows them, 4 in
// flight per thread. The copier cuts segments longer than 64 KiB into
// pieces, so a few large runs still spread over every multiprocessor.
//
// The PTX beside this file (segcopy.ptx) is what gonixl loads at run time
// with cuModuleLoadData; building gonixl needs no CUDA toolkit. Regenerate it
// on a machine with nvcc (CUDA 13.0 was used) after changing this file:
//
//   nvcc -arch=compute_80 -ptx -O3 -o segcopy.ptx segcopy.cu
//
// (segcopy.ptx was made so, with nvcc 13.0 on an H200. 512 threads a block
// were chosen over 256 and 1024: 1585 GB/s gathering 131,072 fragments of
// 32 KiB by segments against 1463 and 1518; by block ids the same gather
// ran at 1968 GB/s, 0.92x cuMemcpyDtoD; BenchmarkGatherKernel in
// examples/gpue2e.)
//
// GONIXL_THREADS sets the threads of a block (default below; the copier
// launches as many as the kernel's launch bounds allow).
//
// compute_80 PTX runs on Ampere, Hopper and later: the driver compiles it for
// the GPU at load time.

struct gonixl_seg {
    unsigned long long src;  // device address to read
    unsigned long long dst;  // device address to write
    unsigned long long len;  // bytes
};

#ifndef GONIXL_THREADS
#define GONIXL_THREADS 512
#endif

// copy_run copies len bytes from src to dst with the threads of one block.
__device__ __forceinline__ void copy_run(unsigned long long srcAddr, unsigned long long dstAddr, unsigned long long len)
{
    const unsigned long long bd = blockDim.x;
    if (((srcAddr | dstAddr | len) & 15ull) == 0) {
        const uint4 *__restrict__ src = (const uint4 *)srcAddr;
        uint4 *__restrict__ dst = (uint4 *)dstAddr;
        const unsigned long long n16 = len >> 4;
        unsigned long long j = threadIdx.x;
        for (; j + 3 * bd < n16; j += 4 * bd) {
            const uint4 a = __ldg(src + j);
            const uint4 b = __ldg(src + j + bd);
            const uint4 c = __ldg(src + j + 2 * bd);
            const uint4 d = __ldg(src + j + 3 * bd);
            dst[j] = a;
            dst[j + bd] = b;
            dst[j + 2 * bd] = c;
            dst[j + 3 * bd] = d;
        }
        for (; j < n16; j += bd) {
            dst[j] = __ldg(src + j);
        }
    } else {
        const unsigned char *__restrict__ src = (const unsigned char *)srcAddr;
        unsigned char *__restrict__ dst = (unsigned char *)dstAddr;
        for (unsigned long long j = threadIdx.x; j < len; j += bd) {
            dst[j] = src[j];
        }
    }
}

// gonixl_copy_segments copies a list of segments, one thread block per
// segment at a time.
extern "C" __global__ void __launch_bounds__(GONIXL_THREADS)
gonixl_copy_segments(const gonixl_seg *__restrict__ segs, unsigned int n)
{
    for (unsigned int i = blockIdx.x; i < n; i += gridDim.x) {
        const gonixl_seg s = segs[i];
        copy_run(s.src, s.dst, s.len);
    }
}

// gonixl_copy_blocks copies by block ids, computing the addresses itself:
// item (r, j), for region r < regions and j < m, is the block run
// bases[r] + blocks[j]*blockLen + off and the slot run
// slot + r*slotStride + j*len, both len bytes; toSlot gathers (blocks into
// the slot), else it scatters. One thread block per item at a time.
extern "C" __global__ void __launch_bounds__(GONIXL_THREADS)
gonixl_copy_blocks(const unsigned long long *__restrict__ bases, const int *__restrict__ blocks,
                   unsigned int regions, unsigned int m, unsigned long long blockLen,
                   unsigned long long off, unsigned long long len, unsigned long long slot,
                   unsigned long long slotStride, int toSlot)
{
    const unsigned long long items = (unsigned long long)regions * m;
    for (unsigned long long it = blockIdx.x; it < items; it += gridDim.x) {
        const unsigned long long r = it / m, j = it % m;
        const unsigned long long blk = bases[r] + (unsigned long long)blocks[j] * blockLen + off;
        const unsigned long long sl = slot + r * slotStride + j * len;
        if (toSlot) {
            copy_run(blk, sl, len);
        } else {
            copy_run(sl, blk, len);
        }
    }
}

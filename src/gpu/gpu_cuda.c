/* The CUDA row of the GPU runtime table (gpu_rt.h). */
#include "gpu_rt.h"

static const char *const CUDA_LIBS[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                        "/usr/local/cuda/lib64/libcudart.so", NULL};

const tzr_gpu_runtime tzr_gpu_cuda = {
    .name = "CUDA",
    .error_type = "cudaError",
    .libs = CUDA_LIBS,
    .env = "TZR_CUDART",
    .symbols =
        {
            [TZR_GPU_F(device_count)] = "cudaGetDeviceCount",
            [TZR_GPU_F(set_device)] = "cudaSetDevice",
            [TZR_GPU_F(dev_alloc)] = "cudaMalloc",
            [TZR_GPU_F(dev_free)] = "cudaFree",
            [TZR_GPU_F(host_alloc)] = "cudaHostAlloc",
            [TZR_GPU_F(host_free)] = "cudaFreeHost",
            [TZR_GPU_F(host_register)] = "cudaHostRegister",
            [TZR_GPU_F(host_unregister)] = "cudaHostUnregister",
            [TZR_GPU_F(copy)] = "cudaMemcpy",
            [TZR_GPU_F(copy_async)] = "cudaMemcpyAsync",
            [TZR_GPU_F(stream_create)] = "cudaStreamCreateWithFlags",
            [TZR_GPU_F(stream_destroy)] = "cudaStreamDestroy",
            [TZR_GPU_F(stream_sync)] = "cudaStreamSynchronize",
            [TZR_GPU_F(stream_query)] = "cudaStreamQuery",
            [TZR_GPU_F(event_create)] = "cudaEventCreateWithFlags",
            [TZR_GPU_F(event_record)] = "cudaEventRecord",
            [TZR_GPU_F(event_sync)] = "cudaEventSynchronize",
            [TZR_GPU_F(event_destroy)] = "cudaEventDestroy",
            [TZR_GPU_F(device_sync)] = "cudaDeviceSynchronize",
            [TZR_GPU_F(error_string)] = "cudaGetErrorString",
            [TZR_GPU_F(runtime_version)] = "cudaRuntimeGetVersion",
            [TZR_GPU_F(copy_batch_async)] = "cudaMemcpyBatchAsync",
        },
    .batch_min_version = 13000,
};

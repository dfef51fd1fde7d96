// Opening the CUDA module and the NVIDIA driver on a machine without a GPU: the module built here answers through
// its entry point; a missing module, a module of another interface version, a library that is no module, a missing
// driver and the toolkit's stub driver are each refused with a clause that names what is wrong.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backend/cuda_driver.h"
#include "backend/cuda_module.h"
#include "backend/device_selection.h"
#include "util/error.h"

using namespace vitpipe;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

CudaModuleLoad missing_module() { return open_cuda_module("/nonexistent/libvitpipe_cuda.so"); }

}  // namespace

TEST(CudaModule, BuiltModuleAnswersThroughItsEntryPoint) {
  const std::string path = CUDA_MODULE_PATH;
  if (path.empty()) GTEST_SKIP() << "this build has no CUDA module (VITPIPE_CUDA=off, or CUDA 13 was not found)";
  EXPECT_TRUE(cuda_module_built());
  const CudaModuleLoad load = open_cuda_module(path);
  ASSERT_TRUE(load.loaded()) << load.error;
  EXPECT_EQ(load.module->abi_version, VITPIPE_CUDA_MODULE_ABI_VERSION);
  EXPECT_EQ(load.module->has_backend, 1);
  EXPECT_NE(load.module->backend_create, nullptr);
  EXPECT_NE(load.module->backend_call, nullptr);
  EXPECT_TRUE(contains(load.module->built_with, "sm_80 sm_90")) << load.module->built_with;
  // The libraries the module linked, as each reports itself: CUDA 13, cuDNN 9, NCCL 2.
  EXPECT_GE(load.libraries.cuda_runtime, 13000);
  EXPECT_EQ(load.libraries.cudnn / 10000, 9u);
  EXPECT_EQ(load.libraries.nccl / 10000, 2);
  EXPECT_GE(load.libraries.cublaslt / 10000, 13u);
  // Opened twice, it is the same table (RTLD_NODELETE, one copy per process).
  EXPECT_EQ(open_cuda_module(path).module, load.module);
}

TEST(CudaModule, MissingModuleIsNamed) {
  const CudaModuleLoad load = missing_module();
  EXPECT_FALSE(load.loaded());
  EXPECT_TRUE(load.path.empty());
  EXPECT_EQ(load.error, "the CUDA module is missing: no /nonexistent/libvitpipe_cuda.so");
}

TEST(CudaModule, OtherInterfaceVersionIsRefused) {
  const CudaModuleLoad load = open_cuda_module(FAKE_MODULE_WRONG_VERSION);
  EXPECT_FALSE(load.loaded());
  EXPECT_EQ(load.path, FAKE_MODULE_WRONG_VERSION);
  EXPECT_TRUE(contains(load.error, "has interface version 999 but this vitpipe needs version " +
                                       std::to_string(VITPIPE_CUDA_MODULE_ABI_VERSION)))
      << load.error;
}

TEST(CudaModule, LibraryWithoutTheEntryPointIsRefused) {
  const CudaModuleLoad load = open_cuda_module(FAKE_MODULE_NO_ENTRY);
  EXPECT_FALSE(load.loaded());
  EXPECT_TRUE(contains(load.error, "is not a vitpipe CUDA module (it exports no vitpipe_cuda_module)")) << load.error;
}

TEST(CudaModule, FileThatIsNoLibraryIsRefusedWithTheLoadersReason) {
  const CudaModuleLoad load = open_cuda_module(VITPIPE_SOURCE_DIR "/README.md");
  EXPECT_FALSE(load.loaded());
  EXPECT_TRUE(contains(load.error, "could not be loaded (")) << load.error;
}

TEST(CudaDriver, MissingDriverIsReportedAsNoDriver) {
  const CudaDriverProbe probe = probe_cuda_driver("libvitpipe_test_no_such_driver.so.1");
  EXPECT_FALSE(probe.found);
  EXPECT_FALSE(probe.usable());
  EXPECT_EQ(probe.version, 0);
  EXPECT_TRUE(contains(probe.error, "no NVIDIA driver: libvitpipe_test_no_such_driver.so.1 could not be opened ("))
      << probe.error;
}

TEST(CudaDriver, LibraryWithoutTheDriverApiIsNoDriver) {
  const CudaDriverProbe probe = probe_cuda_driver(FAKE_MODULE_NO_ENTRY);
  EXPECT_FALSE(probe.found);
  EXPECT_TRUE(contains(probe.error, "does not export cuDriverGetVersion")) << probe.error;
}

TEST(CudaDriver, ToolkitStubIsFoundButNotUsable) {
  const std::string stub = CUDA_STUB_DRIVER;
  if (stub.empty()) GTEST_SKIP() << "no CUDA toolkit here, so no stubs/libcuda.so";
  const CudaDriverProbe probe = probe_cuda_driver(stub);
  EXPECT_TRUE(probe.found);
  EXPECT_FALSE(probe.usable());
  EXPECT_EQ(probe.version, 0);
  EXPECT_TRUE(probe.devices.empty());
  EXPECT_EQ(probe.error,
            "the NVIDIA driver is not usable: cuDriverGetVersion failed with CUDA_ERROR_STUB_LIBRARY: this "
            "libcuda.so.1 is the toolkit's stub, not a driver");
}

// plan --device cuda budgets a rank by the GPU's free memory: asked of the driver with the primary context current
// (the fake answers only then), and every failure said, not thrown.
TEST(CudaDriver, FreeMemoryIsAskedWithTheGpusContext) {
  ASSERT_EQ(setenv("FAKE_CUDA_TOTAL_MEMORY", "8589934592", 1), 0);
  ASSERT_EQ(setenv("FAKE_CUDA_FREE_MEMORY", "6442450944", 1), 0);
  const CudaMemoryInfo info = query_cuda_memory(0, FAKE_DRIVER);
  unsetenv("FAKE_CUDA_TOTAL_MEMORY");
  unsetenv("FAKE_CUDA_FREE_MEMORY");
  EXPECT_TRUE(info.error.empty()) << info.error;
  EXPECT_EQ(info.free_bytes, uint64_t{6} << 30);
  EXPECT_EQ(info.total_bytes, uint64_t{8} << 30);
  const CudaMemoryInfo second = query_cuda_memory(0, FAKE_DRIVER);  // the context was released: retained again
  EXPECT_TRUE(second.error.empty()) << second.error;
  EXPECT_EQ(second.total_bytes, uint64_t{80} << 30);

  EXPECT_TRUE(
      contains(query_cuda_memory(1, FAKE_DRIVER).error, "cuDeviceGet(1) failed with CUDA_ERROR_INVALID_DEVICE"));
  EXPECT_TRUE(contains(query_cuda_memory(0, FAKE_MODULE_NO_ENTRY).error, "does not export cuDevicePrimaryCtxRetain"));
  EXPECT_TRUE(contains(query_cuda_memory(0, "libvitpipe_test_no_such_driver.so.1").error, "could not be opened"));
}

TEST(CudaDriver, VersionText) {
  EXPECT_EQ(cuda_version_text(13000), "13.0");
  EXPECT_EQ(cuda_version_text(12080), "12.8");
  EXPECT_EQ(cuda_driver_error_text(100), "CUDA_ERROR_NO_DEVICE");
  EXPECT_EQ(cuda_driver_error_text(7), "CUresult 7");
}

TEST(DeviceSelection, EveryMissingPartIsNamedOnce) {
  const CudaStatus status = probe_cuda("libvitpipe_test_no_such_driver.so.1", missing_module());
  EXPECT_FALSE(status.usable());
  EXPECT_EQ(status.runtime_devices, 0);
  EXPECT_TRUE(contains(status.error, "no NVIDIA driver: ")) << status.error;
  EXPECT_TRUE(contains(status.error, "; the CUDA module is missing: no /nonexistent/libvitpipe_cuda.so"))
      << status.error;
  const nlohmann::json j = status.to_json();
  EXPECT_EQ(j["built"], cuda_module_built());
  EXPECT_TRUE(j["module"].is_null());
  EXPECT_EQ(j["loaded"], false);
  EXPECT_TRUE(j["driver"].is_null());
  EXPECT_EQ(j["devices"], nlohmann::json::array());
  EXPECT_EQ(j["usable"], false);
  EXPECT_EQ(j["error"], status.error);
}

TEST(DeviceSelection, ModulePresentWithoutDriverSaysTheDriverIsMissing) {
  const std::string path = CUDA_MODULE_PATH;
  if (path.empty()) GTEST_SKIP() << "this build has no CUDA module (VITPIPE_CUDA=off, or CUDA 13 was not found)";
  const CudaStatus status = probe_cuda("libvitpipe_test_no_such_driver.so.1", open_cuda_module(path));
  EXPECT_TRUE(status.module.loaded());
  EXPECT_TRUE(contains(status.error, "no NVIDIA driver: ")) << status.error;
  EXPECT_FALSE(contains(status.error, "module")) << status.error;
  // The runtime's own misleading "driver version is insufficient" never appears: it is not asked without a driver.
  EXPECT_FALSE(contains(status.error, "insufficient")) << status.error;
  const nlohmann::json j = status.to_json();
  EXPECT_EQ(j["module"], path);
  EXPECT_EQ(j["loaded"], true);
  EXPECT_EQ(j["libraries"]["cudnn"].get<std::string>().substr(0, 2), "9.");
}

TEST(DeviceSelection, DeviceNames) {
  EXPECT_EQ(parse_device_choice("cpu"), DeviceChoice::cpu);
  EXPECT_EQ(parse_device_choice("cuda"), DeviceChoice::cuda);
  EXPECT_EQ(parse_device_choice("auto"), DeviceChoice::automatic);
  EXPECT_THROW(parse_device_choice("gpu"), Error);
  EXPECT_THROW(parse_device_choice("CUDA"), Error);
  // cpu never probes CUDA, whatever this machine has.
  EXPECT_EQ(select_device(DeviceChoice::cpu), Device::cpu);
}

TEST(DeviceSelection, EverythingPresentStillSaysTheBackendIsNotBuiltYet) {
  // A fake driver with one sm_90 GPU and a fake module of this interface version that sees it.
  const CudaStatus status = probe_cuda(FAKE_DRIVER, open_cuda_module(FAKE_MODULE_ONE_GPU));
  ASSERT_TRUE(status.driver.usable()) << status.driver.error;
  ASSERT_TRUE(status.module.loaded()) << status.module.error;
  ASSERT_EQ(status.driver.devices.size(), 1u);
  EXPECT_EQ(status.driver.version, 13000);
  EXPECT_EQ(status.driver.devices[0].name, "Fake GPU");
  EXPECT_EQ(status.runtime_devices, 1);
  EXPECT_FALSE(status.usable());
  EXPECT_EQ(status.error, std::string("the CUDA backend is not built into the module ") + FAKE_MODULE_ONE_GPU +
                              " (driver 13.0, GPU 0: Fake GPU (sm_90, 80 GiB))");
  const nlohmann::json j = status.to_json();
  EXPECT_EQ(j["driver"], "13.0");
  EXPECT_EQ(j["devices"][0]["compute_capability"], "9.0");
  EXPECT_EQ(j["backend"], false);
}

TEST(DeviceSelection, MoreRanksOnANodeThanGpusIsRefusedInOneLine) {  // issue #42
  EXPECT_EQ(gpu_for_local_rank(0, 1, 1), 0);
  EXPECT_EQ(gpu_for_local_rank(3, 4, 8), 3);
  EXPECT_EQ(gpu_for_local_rank(1, 2, 2), 1);
  try {
    gpu_for_local_rank(2, 3, 2);
    FAIL() << "3 ranks on 2 GPUs were given a GPU";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "3 ranks on this node")) << what;
    EXPECT_TRUE(contains(what, "2 GPU(s)")) << what;
    EXPECT_TRUE(contains(what, "at most 2 rank(s) per node")) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(DeviceSelection, GpuOlderThanAmpereIsRefusedByName) {
  ASSERT_EQ(setenv("FAKE_CUDA_CAPABILITY", "7.0", 1), 0);
  const CudaStatus status = probe_cuda(FAKE_DRIVER, open_cuda_module(FAKE_MODULE_ONE_GPU));
  unsetenv("FAKE_CUDA_CAPABILITY");
  EXPECT_EQ(status.error, "GPU 0: Fake GPU (sm_70, 80 GiB) is older than sm_80, the oldest GPU this build runs on");
}

TEST(DeviceSelection, RuntimeThatSeesNoGpuGivesItsOwnReason) {
  ASSERT_EQ(setenv("FAKE_CUDA_RUNTIME_ERROR", "CUDA driver version is insufficient (cudaErrorInsufficientDriver)", 1),
            0);
  const CudaStatus status = probe_cuda(FAKE_DRIVER, open_cuda_module(FAKE_MODULE_ONE_GPU));
  unsetenv("FAKE_CUDA_RUNTIME_ERROR");
  EXPECT_EQ(status.runtime_devices, 0);
  EXPECT_EQ(status.error,
            "the module's CUDA runtime sees no GPU although the driver does (CUDA driver version is insufficient "
            "(cudaErrorInsufficientDriver))");
}

#pragma once
// The simhpu SDK: the one header an operator package outside this repository
// includes. Build the package with torch_simhpu.utils.cpp_extension.SimHPUExtension,
// which adds this folder to the include path and links libtorch_simhpu.so.
//
//   device kernels      DeviceTensor, SIMHPU_KERNEL, SIMHPU_DISPATCH_FLOATING,
//                       elementwise loops (kernels/kernel_api.h, kernels/elementwise.h)
//   launching them      EXEC_CMD(kernel, args...), written(t) (aten/exec_cmd.h)
//   argument checks     check_device, check_dtype, ... (aten/op_rules.h)
//   the device          device_count, current_device, streams, synchronize (runtime/)
//   run-time custom ops registerUserCustomOp, UserCustomOpDescriptor (custom_op/custom_op.h)
//   version             TORCH_SIMHPU_VERSION; what a package registers is refused,
//                       with a message naming it, if it was built against another release
#include "torch_simhpu/version.h"

#include "aten/exec_cmd.h"
#include "aten/op_rules.h"
#include "custom_op/custom_op.h"
#include "kernels/elementwise.h"
#include "kernels/kernel_api.h"
#include "runtime/device.h"
#include "runtime/streams.h"

#include <c10/core/DeviceGuard.h>

"""What op-plugin's and torch_npu's tests import: TestCase and run_tests (testcase), tensors and skips
(common_utils), dtype-instantiated tests (decorator), multi-device skips (common_distributed)."""

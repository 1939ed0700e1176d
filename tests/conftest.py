"""The test session compiles into its own gradient cache (a temporary ADCORE_CACHE_DIR,
inherited by the processes tests start), never the user's."""
import atexit
import os
import shutil
import tempfile

os.environ["ADCORE_CACHE_DIR"] = tempfile.mkdtemp(prefix="adcore-test-cache-")
atexit.register(shutil.rmtree, os.environ["ADCORE_CACHE_DIR"], True)


# -- the fast tier: ``pytest -m "not slow"`` (the inner loop of development, about two
# minutes on 2 cores); CI runs everything.  Slow: files that start processes, clusters or
# thread pools, run benchmarks or the documentation's examples, and single tests of more
# than about 3 s.
SLOW_FILES = {
    "test_parallel.py", "test_parallel_threads.py", "test_fresh_process.py",
    "test_docs_examples.py", "test_layers_zoo.py", "test_bench.py", "test_bench_results.py",
    "test_distributed.py", "test_core_property.py", "test_core_reach_property.py",
    "test_disk_cache.py",
}
SLOW_TESTS = {
    "test_bench_gmm_c.py::test_adbench_c_style_kernel_matches_the_per_point_kernel",
    "test_core_alloc.py::test_allocating_kernels_against_finite_differences",
    "test_core_alloc.py::test_numpy_functions_inside_kernels",
    "test_core_cache_cut.py::test_random_shared_leaves_keep_at_most_the_loads",
    "test_core_callees.py::test_c_recursion",
    "test_core_loop_order.py::test_gradients_match_finite_differences",
    "test_core_reach.py::test_calls_without_a_rule_are_named_as_numpy_and_math_functions",
    "test_core_reach.py::test_slice_stores_against_finite_differences",
    "test_core_reach.py::test_slice_stores_of_many_kinds",
    "test_core_replays.py::test_random_refilling_kernels_match_finite_differences",
    "test_core_rules.py::test_blas_products_against_finite_differences",
    "test_core_rules.py::test_hvp_through_a_rule_with_a_reverse_tangent",
    "test_core_rules.py::test_rule_reverse_allocating_on_a_kernel_temporary",
    "test_deferred_machine_code.py::test_overloads_compiled_by_a_capture_get_machine_code_on_demand",
    "test_differential.py::test_random_kernels_both_engines_agree",
    "test_duplicated.py::test_every_activation_same_gradient",
    "test_duplicated.py::test_every_loss_same_gradient",
    "test_duplicated.py::test_njit_layer_both_engines_match_numpy_definition",
    "test_duplicated.py::test_njit_layer_output_starts_at_zero_on_every_call",
    "test_duplicated.py::test_random_chains_same_gradient",
    "test_duplicated_train.py::test_float64_models_train_in_the_native_loop_as_python_steps_do",
    "test_duplicated_train.py::test_packed_parameters_of_any_width_train_exactly_as_python_steps",
    "test_fastcall.py::test_update_after_a_dtype_set_in_place_does_what_the_python_path_does",
    "test_forward.py::test_hvp_matches_finite_differences_of_the_gradient",
    "test_forward.py::test_tangents_match_finite_differences",
    "test_layers_recurrent.py::test_engines_agree_in_float32",
    "test_layers_recurrent.py::test_gradients_match_finite_differences",
    "test_layers_train.py::test_seed_example_1000_epochs",
    "test_staging_direct_ir.py::test_a_classifier_with_logitcrossentropy_is_translated",
    "test_staging_direct_ir.py::test_staged_mlps_get_numbas_loss_and_gradient",
}


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: left out of the fast tier (pytest -m 'not slow')")


def pytest_collection_modifyitems(config, items):
    import pytest
    for item in items:
        name = f"{item.path.name}::{item.originalname}"
        if item.path.name in SLOW_FILES or name in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)

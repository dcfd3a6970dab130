"""Shared fixtures: small inline fleets that need no profile files and no dataset files."""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import pytest
import yaml

MAX_WORKERS = 8  # past this, each worker's own collection (torch, matplotlib: ~10 s of CPU) outweighs the gain


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config) -> int | None:
    """``-n auto`` (pyproject's addopts): one worker per core this process may use (the CPU affinity, which
    counts a container's limit where os.cpu_count() counts the host's), at most MAX_WORKERS;
    PYTEST_XDIST_AUTO_NUM_WORKERS, when set, decides instead."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, MAX_WORKERS))


# Tests left out of the fast subset (python -m pytest -m "not slow"; CI runs them, but for FULL_TIER): those that took
# 20-240 s each in `--durations` under 2 parallel workers on the shared 2-core machine (load ~8; about
# 5-50 s each on a quiet core), i.e. end-to-end runs of a method, studies, real-model checks; added later by
# their CPU seconds (a per-test getrusage record, 10-20 s of CPU each on the busy machine). Tests that
# kill or resume real processes, run set-up or a browser carry @pytest.mark.slow where they are defined.
# "file" marks a whole file, "file::test" every case of a test, "file::test[id" the cases whose id starts so.
SLOW_TESTS = (
    # a Flower app's runs (real training in its ClientApp; skipped where the flower extra is not installed)
    "test_flower.py::test_the_example_app_runs_its_rounds_on_a_mixed_fleet",
    "test_flower.py::test_bytes_are_the_messages_real_sizes",
    "test_flower.py::test_the_same_seed_gives_the_same_rows_and_another_seed_does_not",
    "test_flower.py::test_time_and_energy_follow_the_profile_by_hand",
    "test_flower.py::test_a_device_out_of_memory_reaches_the_strategy_as_a_failure",
    "test_flower.py::test_other_strategies_of_flowers_library_run",
    "test_flower.py::test_a_client_app_that_raises_is_one_line",
    "test_flower.py::test_the_servers_aggregation_is_priced_and_delays_the_next_messages",
    "test_flower.py::test_a_signal_stops_a_flower_run_at_the_apps_next_message",
    "test_flower.py::test_the_earlier_layout_runs_its_rounds_with_its_metrics",
    "test_flower.py::test_in_the_earlier_layout_a_device_out_of_memory_is_a_failure_of_its_strategy",
    "test_flower.py::test_a_strategy_asking_for_more_nodes_than_the_fleet_has_is_one_line",
    "test_flower.py::test_a_grid_call_from_a_thread_of_the_apps_own_is_one_line",
    "test_flower.py::test_two_messages_to_one_node_are_handled_one_after_the_other",
    "test_flower.py::test_a_client_app_without_pytorch_is_timed_by_host_seconds_and_says_so",
    "test_flower.py::test_a_study_of_a_flower_app_sweeps_compares_plots_and_reports",
    "test_profiles_check_fit.py::test_depth_prices_fedx_sub_network_as_fedx_builds_it",
    "test_profiles_check_fit.py::test_check_plot_writes_an_image",
    "test_fedx_eq2_hour.py::test_eq2_on_the_hour_setting_gives_devices_of_different_capacity_different_subnetworks",
    "test_method_examples.py::test_the_example_in_a_folder_outside_the_repository_gives_the_builtins_numbers",
    "test_method_examples.py::test_an_installed_entry_point_names_a_method",
    "test_method_examples.py::test_a_method_named_by_import_path_resumes_in_a_new_process",
    "test_method_examples.py::test_the_write_a_method_page_runs_as_written",
    "test_docs_pages.py::test_the_page_runs_as_written",
    "test_method_examples.py::test_run_with_methods_registers_them",
    "test_strategy_api.py::test_every_registered_method_runs_a_system_only_round",
    "test_layers.py::test_a_planted_violation_breaks_its_contract",
    "test_adapterfl.py::test_fedbase_runs_end_to_end",
    "test_adapterfl.py::test_a_real_reassembled_model_trains_at_reduced_width",
    "test_adapterfl.py::test_adapter_shapes_for_every_reassembly_pair",
    "test_adapterfl.py::test_setup_orders_the_group_and_gives_devices_their_level",
    "test_adaptivefl.py::test_end_to_end_digits",
    "test_api.py::test_sweep_from_dict",
    "test_api.py::test_load_run_without_pandas",
    "test_calibration_fedx.py::test_roofline_cells_are_judged_with_parameters_fitted_elsewhere",
    "test_compare.py::test_a_real_tiny_study_compares_and_plots",
    "test_participation.py::test_compare_report_and_table_show_the_share_of_the_fleet_that_trained",
    "test_participation.py::test_the_report_shows_the_studys_grid_zip_and_base",
    "test_participation.py::test_an_old_study_folder_resumes_and_its_study_json_then_records_the_definition",
    "test_compare.py::test_every_study_figure_has_units_bands_and_stable_colours",
    "test_compare.py::test_plot_cli_dispatches_to_study_plots",
    "test_data.py::test_femnist_natural_groups",
    "test_docs_all_examples.py::test_readme_python_api_example_runs",
    "test_docs_all_examples.py::test_scenario_header_variant_works",
    "test_docs_all_examples.py::test_scenario_header_command_works",
    "test_e2e.py",
    "test_engine.py::test_same_seed_same_metrics_other_seed_differs",
    "test_eval_prefix.py",
    "test_executors.py::test_ray_executor_gives_the_inline_bits",
    "test_executors.py::test_make_executor_builds_the_configured_pool_and_it_matches_inline_job_by_job",
    "test_executors.py::test_pool_and_thread_executors_give_the_inline_bits",
    "test_thread_executor.py::test_every_method_gives_inline_bits_on_worker_threads",
    "test_auto_executor.py::test_runs_of_a_parallel_sweep_with_executor_auto_count_their_share",
    "test_async_progress.py::test_a_stop_between_two_versions_checkpoints_that_step_and_resumes_to_the_uninterrupted_files",
    "test_feddf.py::test_distillation_moves_each_student_toward_the_ensemble_and_is_charged",
    "test_fedx.py::test_fedx_end_to_end_is_deterministic_and_charges_its_server_work",
    "test_flexfl.py::test_end_to_end_digits",
    "test_fused.py::test_fused_is_deterministic",
    "test_models.py::test_submodels_nest_in_global_model[mobilenetv2",
    "test_models.py::test_submodels_nest_in_global_model[resnet18",
    "test_models.py::test_costs_grow_with_rate[mobilenetv2",
    "test_models.py::test_cnn_small_learns_sklearn_digits",
    "test_plots.py::test_plot_one_run_default_folder",
    "test_profiles_measure.py::test_measure_writes_a_profile_that_validates",
    "test_ready_study.py",
    "test_resume.py::test_every_method_resumes_to_the_same_numbers",
    "test_resume.py::test_every_method_gives_its_golden_numbers",
    "test_scenarios_shipped.py::test_shipped_scenario_validates_and_runs_a_round_of_its_protocol[fedx_device_setting",
    "test_scenarios_shipped.py::test_shipped_scenario_validates_and_runs_a_round_of_its_protocol[fedx_digits",
    "test_semi_async_methods.py::test_an_enabled_method_trains_with_late_updates_and_resumes_to_the_same_files",
    "test_semi_async_methods.py::test_every_semi_async_cell_runs_rounds_a_late_update_joins[adapterfl",
    "test_sweep.py::test_index_failures_and_rerun",
    "test_sweep_alone.py",
    "test_thread_determinism.py",
    "test_models.py::test_resnet_shortcuts_train_the_same_in_channels_last_every_time",
    "test_user_methods.py::test_a_module_that_hangs_at_import_is_named_and_ctrl_c_ends_it",
    "test_validation_corpus.py::test_every_rows_model_builds_and_runs_on_the_meta_device",
    "test_buffered_async.py::test_buffered_with_k_equal_to_concurrency_after_each_update_is_the_synchronous_run",
    "test_buffered_async_methods.py::test_fedx_fine_tunes_the_eq4_average_once_per_model_version_with_each_versions_draw",
    "test_buffered_async_methods.py::test_dadaquant_steps_its_level_schedule_once_per_model_version_phi_a_tenth_of_the_versions",
    "test_buffered_async.py::test_heterofl_buffered_on_a_mixed_fleet_applies_stale_updates_and_learns",
    "test_buffered_async.py::test_a_stopped_buffered_heterofl_run_resumes_to_the_files_of_a_run_never_stopped",
    "test_hierarchy.py::test_one_gateway_with_k1_k2_one_is_the_flat_sync_run_bit_for_bit[adapterfl",
    "test_hierarchy.py::test_adapterfl_averages_each_block_at_the_cloud_by_the_clients_the_gateways_gave_it",
)


def _listed(nodeid: str, entries: tuple[str, ...]) -> bool:
    """Whether ``entries`` (SLOW_TESTS' or FULL_TIER's form) name the test ``nodeid``."""
    if nodeid.rfind("@") > nodeid.rfind("]"):  # under --dist loadgroup, xdist appends @<group> to the id
        nodeid = nodeid.rsplit("@", 1)[0]
    path, _, rest = nodeid.partition("::")  # tests/test_x.py::test_y[id] -> test_x.py::test_y[id]
    name = Path(path).name + (f"::{rest}" if rest else "")
    for entry in entries:
        if "[" in entry:
            if name.startswith(entry):
                return True
        elif name == entry or name.startswith(entry + "::") or name.startswith(entry + "["):
            return True
    return False


def _is_slow(nodeid: str) -> bool:
    return _listed(nodeid, SLOW_TESTS)


# The full tier: slow tests that `python -m pytest` (the README's test command, which CI runs on every landing)
# leaves out and `python -m pytest --full` runs (before an issue is closed; about 15 minutes on 2 cores, the
# landing run's pytest 8.5-9.5). The landing run checks every behaviour at least once; what the full tier adds is
# the cross-products over methods and variants whose behaviour a cheaper case checks at landing, and the machine
# environments. Parametrised per-method families mark their full-tier cases where they are defined
# (``test_resume.by_method``); tests marked ``full`` where they are defined count too.
FULL_TIER = (
    # a scenario header's every variant run (at landing each variant loads: test_scenario_header_variant_loads)
    "test_docs_all_examples.py::test_scenario_header_variant_works",
    # machine environments: set-up on Debian's own Python, on a PEP 668 stand-in (where there is no Debian Python)
    # and in an active venv (at landing: CI's own first command, the README's set-up on a fresh clone); Ray, an
    # optional extra (at landing: the executors' and sweeps' contract on the other executors and process sweeps)
    "test_install.py::test_readme_two_commands_on_the_machines_debian_python",
    "test_install.py::test_readme_setup_on_externally_managed_python",
    "test_install.py::test_readme_setup_inside_an_active_venv",
    "test_ray_cluster.py::test_a_run_and_a_sweep_join_a_two_node_cluster_with_the_inline_bits",
    "test_sweep.py::test_ray_dispatch_stops_on_ctrl_c_and_a_rerun_finishes",
    "test_sweep.py::test_ray_dispatch_runs_the_same_runs_as_processes",
    # a sweep's processes killed (at landing: a sweep's failed runs re-run and its finished ones kept, in this
    # process: test_index_failures_and_rerun; a second sweep refused; a run killed and resumed at each mode)
    "test_sweep.py::test_kill_half_way_then_rerun_completes_only_the_missing",
    # the caller's torch thread settings (at landing: every method's bits on the executors' worker threads)
    "test_thread_determinism.py::test_rounds_do_not_depend_on_the_callers_thread_settings",
    "test_executors.py::test_ray_executor_gives_the_inline_bits",
    # more crash points, modes and executors of one check (at landing: a kill in a checkpoint write and in the
    # summary's; a signal in every server mode; each executor's bits; a pool guarded by the caller's main)
    "test_crash_resume.py::test_pool_executor_run_resumes_to_the_same_results",
    "test_crash_resume.py::test_sigkill_then_resume_gives_the_uninterrupted_results[train:3",
    "test_crash_resume.py::test_sigkill_then_resume_gives_the_uninterrupted_results[checkpoint_done",
    "test_crash_resume.py::test_sigkill_then_resume_gives_the_uninterrupted_results[row_written",
    "test_crash_resume.py::test_sigkill_then_resume_gives_the_uninterrupted_results[eval:",
    "test_crash_resume.py::test_sigkill_then_resume_gives_the_uninterrupted_results[row_torn",
    "test_crash_resume.py::test_sigkill_then_resume_in_the_asynchronous_modes_gives_the_uninterrupted_results[fedbuff",
    "test_round_memory.py::test_no_update_is_alive_during_evaluation_or_the_next_training[async",
    "test_round_memory.py::test_no_update_is_alive_during_evaluation_or_the_next_training[hierarchical",
    "test_async.py::test_the_pool_executor_gives_the_inline_numbers_in_async_mode",
    "test_auto_executor.py::test_pool_workers_do_not_rerun_an_unguarded_main_script",
    "test_hierarchy.py::test_a_stopped_hierarchical_run_resumes_to_the_same_files[adaptivefl",
    "test_fused.py::test_fused_equals_inline[None-conv-bn",
    "test_fused.py::test_fused_equals_inline[None-conv-ln",
    "test_fused.py::test_fused_equals_inline[None-cnn_small-bn",
    "test_fused.py::test_fused_equals_inline[0.5-cnn_small-bn",
    "test_fused.py::test_fused_equals_inline[0.5-cnn_small-none",
    "test_fused.py::test_fused_equals_inline[0.5-conv-ln",
    # the per-method equalities of the heavier methods (at landing: the lighter methods' cases)
    "test_hierarchy.py::test_one_gateway_with_k1_k2_one_is_the_flat_sync_run_bit_for_bit[adapterfl",
    "test_hierarchy.py::test_one_gateway_with_k1_k2_one_is_the_flat_sync_run_bit_for_bit[fedx",
    "test_hierarchy.py::test_one_gateway_with_k1_k2_one_is_the_flat_sync_run_bit_for_bit[decoupled",
    "test_hierarchy.py::test_one_gateway_with_k1_k2_one_is_the_flat_sync_run_bit_for_bit[adaptivefl",
    "test_hierarchy.py::test_one_gateway_with_k1_k2_one_is_the_flat_sync_run_bit_for_bit[dadaquant_fedx_setting",
    "test_hierarchy.py::test_adapterfl_averages_each_block_at_the_cloud_by_the_clients_the_gateways_gave_it",
    "test_semi_async_methods.py::test_an_enabled_method_trains_with_late_updates_and_resumes_to_the_same_files[adapterfl",
    "test_semi_async_methods.py::test_an_enabled_method_trains_with_late_updates_and_resumes_to_the_same_files[fedx",
    "test_semi_async_methods.py::test_an_enabled_method_trains_with_late_updates_and_resumes_to_the_same_files[scalefl",
    "test_semi_async_methods.py::test_an_enabled_method_trains_with_late_updates_and_resumes_to_the_same_files[flexfl",
    "test_buffered_async.py::test_buffered_with_k_equal_to_concurrency_after_each_update_is_the_synchronous_run[fedx",
    "test_buffered_async.py::test_buffered_with_k_equal_to_concurrency_after_each_update_is_the_synchronous_run[scalefl",
    "test_buffered_async.py::test_buffered_with_k_equal_to_concurrency_after_each_update_is_the_synchronous_run[adaptivefl",
    # the heavy methods' shipped paper scenarios' round and FedX's end-to-end run (at landing: their smoke scenarios'
    # rounds, their golden runs)
    "test_scenarios_shipped.py::test_shipped_scenario_validates_and_runs_a_round_of_its_protocol[fedx_device_setting",
    "test_scenarios_shipped.py::test_shipped_scenario_validates_and_runs_a_round_of_its_protocol[fedx_digits",
    "test_scenarios_shipped.py::test_shipped_scenario_validates_and_runs_a_round_of_its_protocol[adapterfl_fmnist",
    "test_scenarios_shipped.py::test_shipped_scenario_validates_and_runs_a_round_of_its_protocol[adapterfl_cifar10",
    "test_fedx.py::test_fedx_end_to_end_is_deterministic_and_charges_its_server_work",
    "test_adapterfl.py::test_fedbase_runs_end_to_end",
    "test_profiles_check_fit.py::test_depth_prices_fedx_sub_network_as_fedx_builds_it",
    # a numerics property of one family in one memory layout (at landing: every family's submodels and costs)
    "test_models.py::test_resnet_shortcuts_train_the_same_in_channels_last_every_time",
    # cnn_small trained alone on digits (at landing: the quickstart's cnn_small reaches 85% on digits, test_e2e)
    "test_models.py::test_cnn_small_learns_sklearn_digits",
    # the wave-2 methods run twice with one seed and once with another (at landing: each method's golden digest,
    # which any nondeterminism breaks, test_resume; another seed's other numbers, test_engine)
    "test_wave2_determinism.py::test_same_seed_same_metrics",
    # a Flower app against Flower's own simulation runtime, on Ray (at landing: the app's runs on the fleet,
    # its failures, bytes, time and energy by hand, where the flower extra is installed)
    "test_flower.py::test_on_an_ideal_fleet_the_global_model_equals_flowers_own_simulation",
    "test_flower.py::test_the_example_folder_runs_unchanged_under_flowers_own_simulation",
)


def _in_full_tier(item) -> bool:
    return item.get_closest_marker("full") is not None or _listed(item.nodeid, FULL_TIER)


def _named_on_the_command_line(item, config) -> bool:
    """Whether a ``path::test`` argument names ``item`` (a full-tier test asked for by name runs without --full)."""
    for arg in config.args:
        path, sep, rest = arg.partition("::")
        if sep and Path(path).resolve() == Path(item.path).resolve() and item.nodeid.partition("::")[2].startswith(rest):
            return True
    return False


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--full", action="store_true", default=False,
        help="also run the full tier (FULL_TIER in tests/conftest.py: the cross-products over methods and variants, "
        "Debian's Python, two Ray nodes); CI's landing run leaves it out",
    )


def pytest_report_header(config) -> str:
    if config.getoption("--full"):
        return "iotfl-sim tests: the full suite (--full)"
    return "iotfl-sim tests: the landing run; the full tier is left out (python -m pytest --full runs it too)"


def pytest_configure(config) -> None:
    """One trace cache (``fl.trace_cache``) for the whole session, shared by the xdist workers and every process
    a test starts, in a fresh temporary folder: tests neither read nor fill the user's ~/.cache, and start from
    an empty cache as CI does. The controller makes it before the workers start; they inherit it."""
    if hasattr(config, "workerinput") or os.environ.get("IOTFL_CACHE_DIR"):
        return
    import tempfile

    folder = tempfile.mkdtemp(prefix="iotfl-test-cache-")
    os.environ["IOTFL_CACHE_DIR"] = folder
    config._iotfl_cache_dir = folder


def pytest_unconfigure(config) -> None:
    folder = getattr(config, "_iotfl_cache_dir", None)
    if folder:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop("IOTFL_CACHE_DIR", None)


def pytest_collection_modifyitems(config, items) -> None:
    full = [item for item in items if _in_full_tier(item) and not _named_on_the_command_line(item, config)]
    if full and not config.getoption("--full"):
        config.hook.pytest_deselected(items=full)
        left_out = {id(item) for item in full}
        items[:] = [item for item in items if id(item) not in left_out]
    for item in items:
        if _is_slow(item.nodeid) or _in_full_tier(item):
            item.add_marker(pytest.mark.slow)
    # Long tests first: xdist hands tests to the workers in this order (after the xdist groups, largest
    # first), and a long test handed out last would leave the other workers idle while it runs. So the files
    # that hold slow tests come before the others, each file's tests together and in their order (a module
    # fixture is then built once per worker; the Ray tests aside, below); the sort is stable.
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    # The tests sharing the local Ray (ray_cluster) come after the other Ray tests (test_ray_cluster.py joins a
    # cluster of its own and must find Ray disconnected): that Ray then starts once and stays up until the last
    # of them, instead of stopping before a Ray test that does not share it and starting again after.
    items.sort(key=lambda item: (item.path not in slow_files, "ray_cluster" in getattr(item, "fixturenames", ())))


SHARED_DATA = Path(os.environ.get("IOTFL_TEST_DATA", Path(__file__).resolve().parents[2] / "shared" / "datasets"))

TINY = {
    "name": "tiny",
    "device_class": "mcu",
    "compute": {"flops": 1.0e9, "jitter": {"dist": "none"}},
    "memory": {"total_mb": 64, "free_mb": 32, "sigma_mb": 0.0},
    "power": {"idle_w": 0.1, "train_w": 1.0, "tx_w": 0.8, "rx_w": 0.3},
    "battery": {"capacity_j": 5000.0},
    "link": {"down_mbps": 1.0, "up_mbps": 0.5, "rtt_ms": 50.0},
}
BIG = {
    "name": "big",
    "device_class": "sbc",
    "compute": {"flops": 1.0e10, "jitter": {"dist": "none"}},
    "memory": {"total_mb": 4000, "free_mb": 2000, "sigma_mb": 0.0},
    "power": {"idle_w": 3.0, "train_w": 6.0, "tx_w": 1.0, "rx_w": 1.0},
    "link": {"down_mbps": 50.0, "up_mbps": 20.0, "rtt_ms": 5.0},
}


def base_scenario(**over) -> dict:
    sc = {
        "name": "t",
        "seed": 3,
        "rounds": 2,
        "clients_per_round": 4,
        "fleet": {
            "groups": [
                {"name": "tiny", "count": 4, "profile": copy.deepcopy(TINY)},
                {"name": "big", "count": 4, "profile": copy.deepcopy(BIG)},
            ]
        },
        "data": {"dataset": "digits"},
        "model": {"family": "cnn_small"},
        "algorithm": {"name": "fedavg"},
        "local": {"epochs": 1, "batch_size": 16, "lr": 0.05},
        "output": {"progress": False},
    }
    for k, v in over.items():
        sc[k] = v
    return sc


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray (2 CPUs) for every Ray test of this xdist worker (they share the group "ray"): a sweep or
    executor finding Ray connected leaves it running, so each test no longer starts and stops its own cluster
    and re-imports torch in fresh Ray workers (five start-ups, most of these tests' wall time)."""
    pytest.importorskip("ray")
    import ray

    from iotfl_sim.exec.ray_exec import start_ray

    owns = start_ray(None, 2)
    yield
    if owns:
        ray.shutdown()


def pytest_runtest_teardown(item, nextitem) -> None:
    """The shared Ray stops after the last test that uses it in this worker (the "ray" xdist group runs its
    tests one after another), not at the session's end: its daemons would otherwise hold memory and take CPU
    for the rest of the suite. A later Ray test (one run on its own) starts its own Ray again."""
    if "ray_cluster" in getattr(item, "fixturenames", ()) and (
        nextitem is None or "ray_cluster" not in getattr(nextitem, "fixturenames", ())
    ):
        ray = sys.modules.get("ray")  # None where Ray is not installed (the test was skipped)
        if ray is not None and ray.is_initialized():
            ray.shutdown()


@pytest.fixture(scope="session")
def method_run(tmp_path_factory):
    """``method_run(name)``: the uninterrupted run of tests/test_resume.py's ``METHODS[name]`` (its 2-round
    scenario, inline, checkpointed every round: ``test_resume.uninterrupted_run``), made on first use in this
    worker and shared by the tests that compare other runs with it (the resume test, the thread executor's)."""
    from test_resume import method_scenario, uninterrupted_run

    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            tmp = tmp_path_factory.mktemp(f"method-{name}")
            (tmp / "scenario.yaml").write_text(yaml.safe_dump(method_scenario(name), sort_keys=False))
            made[name] = uninterrupted_run(tmp / "scenario.yaml", tmp / "runs")
        return made[name]

    return get


@pytest.fixture
def data_root(monkeypatch) -> str | None:
    """Point IOTFL_DATA at the shared offline datasets when it is unset (``validate`` checks the dataset
    files, as ``run`` does); the data root in force, or None where this machine has none."""
    if not os.environ.get("IOTFL_DATA") and SHARED_DATA.is_dir():
        monkeypatch.setenv("IOTFL_DATA", str(SHARED_DATA))
    return os.environ.get("IOTFL_DATA") or None


def assert_validates(path, capsys, data_root: str | None) -> None:
    """``iotfl-sim validate path`` says ok; with no dataset files on this machine it must say that it
    has no data root (as ``run`` would), and the rest of the scenario must validate system-only."""
    from iotfl_sim.cli import main

    code = main(["validate", str(path)])
    err = capsys.readouterr().err
    if data_root is None and code == 2 and "data.dataset:" in err and "no data root set" in err:
        assert main(["validate", str(path), "--set", "numerics=none"]) == 0, capsys.readouterr().err
    else:
        assert code == 0, err


@pytest.fixture
def write_scenario(tmp_path):
    def write(data: dict, name: str = "scenario.yaml") -> Path:
        p = tmp_path / name
        p.write_text(yaml.safe_dump(data, sort_keys=False))
        return p

    return write


def strategy_context(
    recipe,
    n: int = 20,
    k: int = 5,
    *,
    rounds: int = 10,
    samples: int = 10,
    memory_need=None,
    declared=None,
    weights: bool = True,
):
    """A StrategyContext for calling a strategy directly: ``n`` devices of ``samples`` samples holding every
    class, ``k`` clients per round; ``memory_need`` defaults to 0 and the declared memory to plenty;
    ``weights=False`` skips building initial weights (pool construction only)."""
    import numpy as np

    from iotfl_sim.algorithms.base import StrategyContext

    def initial_state(r, s):
        return {key: v.detach().clone() for key, v in r.build(s).state_dict().items()} if weights else {}

    return StrategyContext(
        recipe=recipe,
        num_devices=n,
        samples_per_device=np.full(n, samples),
        labels_per_device=[np.arange(recipe.num_classes)] * n,
        num_classes=recipe.num_classes,
        seed=0,
        rounds=rounds,
        clients_per_round=k,
        memory_need=memory_need or (lambda r, s: 0.0),
        declared_free_memory=np.full(n, 1e12) if declared is None else np.asarray(declared, dtype=float),
        initial_state=initial_state,
    )


def relative_fleet(counts: tuple[int, int, int] = (4, 4, 4), strong_sigma2: list[float] | None = None) -> dict:
    """Weak / medium / strong groups of TINY devices in FlexFL's relative memory units (free 35 / 60 / 110,
    sigma^2 drawn from {5, 8, 10} unless ``strong_sigma2`` says otherwise for the strong group)."""
    sig = [5, 8, 10]
    return {
        "memory_units": "relative",
        "groups": [
            {"name": "weak", "count": counts[0], "profile": copy.deepcopy(TINY), "memory": {"free": 35, "sigma2": sig}},
            {"name": "medium", "count": counts[1], "profile": copy.deepcopy(TINY), "memory": {"free": 60, "sigma2": sig}},
            {"name": "strong", "count": counts[2], "profile": copy.deepcopy(TINY),
             "memory": {"free": 110, "sigma2": strong_sigma2 or sig}},
        ],
    }


@pytest.fixture
def isolated_methods():
    """The method registry as it was before the test (a test that registers methods, by import path, entry
    point or ``run(methods=)``, must not leave them for the next test of its worker)."""
    from iotfl_sim import methods

    saved = dict(methods._METHODS)
    yield
    methods._METHODS.clear()
    methods._METHODS.update(saved)


def run_events(tmp_path: Path, data: dict, name: str) -> tuple[Path, list[dict]]:
    """Run the scenario ``data`` (as ``iotfl-sim run``, into ``tmp_path / name``); its run folder and its events."""
    import json

    from iotfl_sim.cli import main

    data = {**data, "name": name}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["run", str(path), "--out", str(tmp_path / name), "--quiet"]) == 0
    (run,) = (tmp_path / name).iterdir()
    return run, [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]

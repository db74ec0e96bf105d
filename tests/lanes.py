"""The two lanes of the suite: `make check` runs the tests that start no process and take no more than a second
or two (ruff and mypy beside them, under a minute on 2 cores); `make test` runs every test. docs/testing.md.

The tests the fast lane leaves out are listed HERE and nowhere else, each with why:
- EXTERNAL: the test starts a process: a `headroom run` child (conftest's Agent, agent_factory), Prometheus,
  promtool, chromium, Alertmanager, VictoriaMetrics, node_exporter, openssl, kubectl, systemd-analyze, Slurm,
  Podman, torch or vLLM, the simulation's stand-in processes, or any other subprocess. Marked ``external``.
- SLOW: in-process, but seconds long (measured with ``pytest --durations``). Marked ``slow``.
A key is a path from the repository root, for every test of that file, or ``path::test`` (``path::Class::test``)
for one test with all its parameters.

A test that starts a process and is not in EXTERNAL fails, in every run (`make test` and so CI included), with a
message naming this file: a new test cannot slip into the fast lane by starting one. tests/conftest.py imports the
hooks below; tests/test_suite_config.py checks the guard, that every key still names a test, and (statically) that a
test whose body names subprocess, Popen, shutil.which, os.fork, an Agent or agent_factory is listed.
"""

from __future__ import annotations

import multiprocessing.util
import os
import subprocess

import pytest

EXTERNAL: dict[str, str] = {
    # whole files: all or most of their tests start something. Files where most tests start none are listed test by
    # test below instead: the tests the guard failed when the file ran unlisted.
    "tests/test_alertmanager.py": "promtool, Prometheus, Alertmanager, `headroom run` children",
    "tests/test_cli_flags.py": "node_exporter, `headroom run` children, `headroom` CLI children, subprocesses",
    "tests/test_dcgm_compat.py": "promtool, Prometheus, subprocesses",
    "tests/test_deploy.py": "Prometheus, kubectl, `headroom` CLI children, subprocesses",
    "tests/test_e2e.py": "promtool, Prometheus, `headroom run` children",
    "tests/test_estimate_cli.py": "`headroom` CLI children, stand-in processes, subprocesses",
    "tests/test_faults_record.py": "`headroom run` children, subprocesses",
    "tests/test_fleet.py": "Prometheus, `headroom` CLI children, stand-in processes, subprocesses",
    "tests/test_fleet_report.py": "Prometheus, `headroom` CLI children, subprocesses",
    "tests/test_golden.py": "promtool, Prometheus, stand-in processes, subprocesses",
    "tests/test_hostile_names.py": "promtool, Prometheus, subprocesses",
    "tests/test_identity_churn.py": "subprocesses",
    "tests/test_landing_browser.py": "chromium, `headroom run` children, stand-in processes",
    "tests/test_load.py": "`headroom run` children under load, bench/soak.py",
    "tests/test_longterm_store.py": "Prometheus, VictoriaMetrics, `headroom` CLI children",
    "tests/test_memory.py": "`headroom run` children, subprocesses",
    "tests/test_node_exporter_parity.py": "Prometheus, node_exporter, `headroom` CLI children, subprocesses",
    "tests/test_notify_process.py": "`headroom` CLI children, subprocesses",
    "tests/test_npd_check.py": "`headroom check` children against `headroom run` children",
    "tests/test_nvml_binding.py": "`headroom snapshot` children on each binding",
    "tests/test_probe_gauges.py": "`headroom run` children",
    "tests/test_probe_host.py": "`headroom run` children",
    "tests/test_probe_landing_browser.py": "chromium",
    "tests/test_prometheus_configs.py": "promtool, Prometheus, `headroom` CLI children, subprocesses",
    "tests/test_prometheus_integration.py": "Prometheus, Alertmanager, `headroom run` children",
    "tests/test_real_dataloader.py": "real torch, real vLLM, subprocesses",
    "tests/test_real_load.py": "`headroom run` children, stand-in processes, subprocesses",
    "tests/test_real_podman.py": "real Podman, `headroom run` children, stand-in processes",
    "tests/test_real_probe.py": "real vLLM, `headroom run` children, `headroom` CLI children, subprocesses",
    "tests/test_real_slurm.py": "real Slurm, `headroom run` children, stand-in processes, subprocesses",
    "tests/test_real_torchrun.py": "real torch, `headroom run` children, stand-in processes, subprocesses",
    "tests/test_real_vllm_sizing.py": "a real vLLM server (skipped without the real-component venv)",
    "tests/test_real_vllm.py": "real torch, real vLLM, `headroom run` children, stand-in processes",
    "tests/test_record_replay.py": "`headroom run` children, `headroom` CLI children, stand-in processes, subprocesses",
    "tests/test_reload.py": "`headroom run` children (SIGHUP)",
    "tests/test_rules.py": "promtool, Prometheus, subprocesses",
    "tests/test_systemd_unit.py": "Prometheus, systemd-analyze, subprocesses",
    "tests/test_webconfig.py": "openssl makes the certificates (a module fixture) for most tests",
    "tests/test_workload_e2e.py": "Prometheus, `headroom run` children, `headroom` CLI children",
    # single tests (a parametrized one with all its parameters, or one [parameter])
    "bench/test_bench.py::test_a_child_started_on_port_0_is_found_on_the_port_the_kernel_gave_it":
        "`python -m http.server` child",
    "bench/test_bench.py::test_a_child_that_exits_before_listening_is_reported_not_waited_for":
        "a Python child process",
    "bench/test_bench.py::test_the_farm_starts_named_processes_and_kills_them_all":
        "named stand-in processes",
    "bench/test_bench.py::test_the_reference_tick_with_pods_churning_names_each_live_pod_and_leaves_nothing_behind":
        "named stand-in processes",
    "bench/test_bench.py::test_the_bench_pods_have_the_pids_controller_so_an_idle_pods_refresh_lists_no_tree":
        "the bench's pods: named stand-in processes in real cgroups",
    "tests/test_architecture.py::test_the_agent_loads_prometheus_client_only_to_read_a_serving_runtime":
        "a fresh interpreter, to see what it imports",
    "tests/test_auto_members.py::test_a_declared_profile_keeps_its_processes_and_takes_the_place_of_an_identity_it_claims":
        "a Python child process",
    "tests/test_auto_members.py::test_a_launcher_outside_any_cgroup_has_its_process_tree":
        "a Python child process",
    "tests/test_auto_members.py::test_a_slurm_job_on_cgroup_v1_has_every_process_of_its_cgroup_measured_as_proc_says":
        "a Python child process",
    "tests/test_auto_members.py::test_a_slurm_job_on_cgroup_v2_lists_its_steps_and_tasks":
        "a Python child process",
    "tests/test_auto_members.py::test_an_idle_automatic_workload_is_read_again_when_its_cgroup_moves_and_a_busy_one_every_tick":
        "a Python child process",
    "tests/test_auto_members.py::test_automatic_entries_follow_their_identities_and_leave_nothing_behind":
        "a Python child process",
    "tests/test_config.py::test_check_config_accepts_a_profile_with_only_an_endpoint":
        "`headroom check-config` child",
    "tests/test_config.py::test_check_config_exit_codes":
        "`headroom check-config` children",
    "tests/test_config.py::test_check_config_reads_the_web_config_file_as_run_does":
        "`headroom check-config` child",
    "tests/test_config.py::test_check_config_refuses_the_listen_addresses_run_refuses":
        "`headroom check-config` children",
    "tests/test_config.py::test_default_config_path_is_cwd_config_yaml":
        "`headroom check-config` child",
    "tests/test_dashboards.py::test_committed_dashboards_equal_the_generator_output":
        "grafana/generate.py --check child",
    "tests/test_faults.py::test_a_disk_disappears_and_comes_back":
        "`headroom run` child",
    "tests/test_faults.py::test_a_host_file_fails_then_heals":
        "`headroom run` child",
    "tests/test_faults.py::test_a_workload_process_vanishes_and_returns":
        "`headroom run` child",
    "tests/test_faults.py::test_dev_shm_goes_missing_and_comes_back":
        "`headroom run` child",
    "tests/test_faults.py::test_proc_pid_io_permission_denied":
        "`headroom run` child",
    "tests/test_faults.py::test_proc_pressure_absent":
        "`headroom run` child",
    "tests/test_faults.py::test_processes_vanish_mid_read_under_churn":
        "`headroom run` child",
    "tests/test_first_run.py::test_a_port_held_by_another_headroom_names_its_pid":
        "another `headroom run`",
    "tests/test_first_run.py::test_building_the_package_prints_no_deprecation_warning":
        "`python -m pip` child",
    "tests/test_first_run.py::test_make_demo_logs_its_url_once_it_listens":
        "make",
    "tests/test_first_run.py::test_make_demo_on_a_taken_port_suggests_another_address_and_announces_no_url":
        "make",
    "tests/test_first_run.py::test_make_demo_with_a_mistyped_scenario_says_did_you_mean_and_not_the_port_hint":
        "make",
    "tests/test_first_run.py::test_readme_command_runs_as_written":
        "`headroom estimate` child",
    "tests/test_first_run.py::test_the_wheel_ships_the_runbook_the_agent_serves":
        "`python -m pip` child, a child process",
    "tests/test_fleet_profile.py::test_an_eight_gpu_host_stays_within_the_series_budget":
        "`headroom snapshot` child",
    "tests/test_fleet_profile.py::test_fleet_info_and_gpu_price_are_exported":
        "`headroom snapshot` child",
    "tests/test_fleet_profile.py::test_no_price_and_no_group_no_series":
        "`headroom snapshot` child",
    "tests/test_fuzz_config.py::test_check_config_exits_2_with_positions_and_no_traceback":
        "`headroom check-config` child, a child process",
    "tests/test_gpu_check.py::test_without_a_gpu_the_check_says_why_and_fails":
        "`python -m bench.gpu --check` child",
    "tests/test_host_collectors.py::test_shm_on_a_real_tmpfs_sees_size_fstype_and_what_is_written":
        "mount/umount",
    "tests/test_hostile_cmdline.py::test_a_1_88_mb_launcher_command_line_does_not_stall_serving_detection":
        "a Python child process",
    "tests/test_hostile_cmdline.py::test_a_1_mb_command_line_from_another_user_delays_no_tick_by_more_than_50_ms":
        "a Python child process",
    "tests/test_hostile_cmdline.py::test_a_pattern_past_the_matched_prefix_does_not_match":
        "a child process",
    "tests/test_hostile_cmdline.py::test_check_config_names_a_pattern_re2_cannot_compile":
        "`headroom check-config` child",
    "tests/test_hostile_cmdline.py::test_serving_detection_honours_the_profiles_user_and_uid_rules":
        "a Python child process",
    "tests/test_hostile_cmdline.py::test_user_and_uid_restrict_a_cmdline_rule":
        "a child process",
    "tests/test_hostile_config.py::test_a_drop_in_symlinked_to_a_secret_is_not_printed_back":
        "`headroom check-config` child",
    "tests/test_hostile_config.py::test_a_fifo_as_config_file_is_refused":
        "`headroom check-config` child",
    "tests/test_hostile_config.py::test_a_fifo_as_web_config_stops_start_up_with_a_message":
        "`headroom run` child",
    "tests/test_hostile_config.py::test_a_fifo_certificate_is_refused":
        "openssl (the certs fixture) and a `headroom run` child",
    "tests/test_hostile_config.py::test_a_hostile_drop_in_is_an_error_for_that_file":
        "`headroom check-config` child",
    "tests/test_hostile_config.py::test_a_reload_never_turns_tls_or_auth_off":
        "openssl (the certs fixture) and a `headroom run` child",
    "tests/test_hostile_config.py::test_a_reload_stuck_in_the_kernel_is_reported_and_sigterm_still_stops":
        "a Python child process",
    "tests/test_hostile_config.py::test_a_window_that_needs_gigabytes_is_refused_by_check_config":
        "`headroom check-config` child",
    "tests/test_hostile_config.py::test_an_alias_bomb_fails_fast_with_its_position":
        "`headroom check-config` child",
    "tests/test_hostile_config.py::test_emptying_the_web_config_of_a_running_agent_keeps_auth_and_shows_in_a_metric":
        "`headroom run` child",
    "tests/test_hostile_config.py::test_sighup_with_a_fifo_drop_in_fails_the_reload_and_sigterm_still_stops":
        "`headroom run` child",
    "tests/test_hostile_config.py::test_tls_and_users_may_still_be_added_or_changed_at_reload":
        "openssl (the certs fixture) and a `headroom run` child",
    "tests/test_hostile_config.py::test_windows_within_the_budget_pass":
        "`headroom check-config` child",
    "tests/test_hostile_http.py::test_a_tls_handshake_trickled_byte_by_byte_is_cut_at_the_head_deadline":
        "openssl",
    "tests/test_hostile_models.py::test_a_huge_index_keeps_only_its_shard_names":
        "os.fork",
    "tests/test_hostile_models.py::test_a_large_header_is_scanned_in_bounded_memory_without_stalling_other_threads":
        "os.fork",
    "tests/test_hostile_models.py::test_a_real_unprivileged_process_is_read_as_its_own_user":
        "a Python child process",
    "tests/test_hostile_models.py::test_a_safetensors_header_over_the_cap_is_refused_without_echoing_its_length":
        "os.fork",
    "tests/test_hostile_models.py::test_a_sparse_2_gib_config_json_is_refused_by_its_size":
        "os.fork",
    "tests/test_hostile_models.py::test_a_stuck_model_read_does_not_keep_the_process_from_exiting":
        "a Python child process",
    "tests/test_hostile_models.py::test_sigterm_of_headroom_run_returns_promptly_with_a_fifo_config_json":
        "`headroom run` child",
    "tests/test_hostile_models.py::test_vllm_serve_dev_zero_is_refused_at_once":
        "os.fork",
    "tests/test_hostile_numbers.py::test_a_value_prometheus_cannot_parse_leaves_the_scrape_up_on_a_real_prometheus":
        "Prometheus",
    "tests/test_hostile_numbers.py::test_estimate_refuses_a_hostile_config_in_one_line_with_exit_2":
        "`headroom estimate` child",
    "tests/test_hostile_serving.py::test_four_endpoints_of_140k_series_cost_little_and_an_honest_one_beside_them_reads_right":
        "endpoint servers and an agent as subprocesses",
    "tests/test_hostile_traces.py::test_40_lines_near_the_cap_are_refused_or_replayed_in_bounded_time_and_memory":
        "a Python child process",
    "tests/test_hostile_traces.py::test_a_1_gib_single_line_trace_is_refused_with_bounded_memory":
        "a Python child process",
    "tests/test_hostile_traces.py::test_a_5000_digit_integer_is_named_by_file_and_line":
        "`headroom replay` child",
    "tests/test_hostile_traces.py::test_a_live_recording_with_a_workload_that_has_no_processes_replays":
        "`headroom run` child",
    "tests/test_hostile_traces.py::test_every_hostile_trace_exits_2_with_file_line_and_no_traceback":
        "`headroom replay` child",
    "tests/test_hostile_traces.py::test_malformed_bytes_are_named_by_file_and_line":
        "`headroom replay` child (run_replay)",
    "tests/test_hostile_traces.py::test_the_agent_reports_a_removed_recording_directory":
        "`headroom run` child",
    "tests/test_identity.py::test_a_huge_file_a_fifo_and_a_device_in_the_job_mapping_are_refused":
        "a Python child process",
    "tests/test_identity.py::test_a_process_whose_files_are_closed_to_the_agent_says_so":
        "a child process",
    "tests/test_identity.py::test_headroom_run_with_kubernetes_flags_end_to_end":
        "`headroom run` child",
    "tests/test_identity.py::test_pods_and_jobs_holding_gpus_become_workloads_with_labels":
        "promtool",
    "tests/test_infiniband.py::test_the_same_figures_as_a_real_node_exporter":
        "node_exporter",
    "tests/test_kubelet.py::test_checked_in_code_matches_the_proto":
        "grpc_tools.protoc child",
    "tests/test_kubelet.py::test_permission_denied_is_named":
        "forks a child that drops privileges",
    "tests/test_latency_resolution.py::test_a_running_agent_reports_vllms_5ms_gaps_as_a_bound_and_the_8ms_slo_as_not_measurable":
        "`headroom run` child",
    "tests/test_launchers.py::test_a_launcher_found_under_simulate_has_its_metrics_read":
        "`headroom run` child",
    "tests/test_launchers.py::test_a_serving_launcher_without_a_gpu_is_a_workload_whose_endpoint_is_scraped":
        "a Python child process",
    "tests/test_launchers.py::test_an_automatic_ollama_server_has_its_api_ps_read":
        "a Python child process",
    "tests/test_launchers.py::test_an_automatic_servers_metrics_are_scraped_where_its_command_line_says":
        "a Python child process",
    "tests/test_openmetrics.py::test_collect_query_parameter_is_ignored_as_the_readme_says":
        "a `headroom run` child (the agent fixture)",
    "tests/test_openmetrics.py::test_live_agent_answers_others_with_text_that_promtool_accepts":
        "a `headroom run` child (the agent fixture), promtool",
    "tests/test_openmetrics.py::test_live_agent_answers_prometheus_with_openmetrics":
        "`headroom run` child",
    "tests/test_openmetrics.py::test_live_agent_gzips_openmetrics_and_text_separately":
        "a `headroom run` child (the agent fixture)",
    "tests/test_probe.py::test_a_client_the_host_starves_of_cpu_is_starved_not_saturated":
        "a Python child process",
    "tests/test_probe.py::test_ctrl_c_stops_the_load_within_a_second_and_prints_the_partial_result":
        "`headroom probe` child",
    "tests/test_probe.py::test_probe_workload_chat_on_the_demo_finds_the_agents_endpoint_and_puts_the_estimate_beside_it":
        "`headroom run` child",
    "tests/test_probe_store.py::test_save_replaces_atomically_a_reader_never_sees_half_a_file":
        "a writer process",
    "tests/test_processes.py::test_a_simulations_real_stand_ins_have_unknown_io_a_simulated_proc_has_its_own":
        "a Python child process",
    "tests/test_processes.py::test_members_stat_and_io_stay_open_on_the_live_proc_and_close_when_they_exit":
        "a Python child process",
    "tests/test_processes.py::test_the_cpus_a_workload_may_use_include_its_main_process_cpu_affinity":
        "a Python child process",
    "tests/test_processes.py::test_the_real_proc_finds_a_new_process_and_not_its_threads":
        "a Python child process",
    "tests/test_procfs.py::test_kept_pid_files_of_a_denied_file_are_none_and_keep_no_descriptor":
        "os.fork",
    "tests/test_procfs.py::test_kept_pid_files_read_a_live_process_afresh_and_say_gone_once_it_is_reaped":
        "a Python child process",
    "tests/test_procfs.py::test_pid_reader_permission_denied_is_none_for_a_real_unprivileged_reader":
        "os.fork",
    "tests/test_procfs.py::test_pid_readers_raise_process_gone_for_a_pid_that_exited":
        "a Python child process",
    "tests/test_sampler.py::test_collector_order_does_not_depend_on_which_module_was_imported_first":
        "a fresh interpreter per import order",
    "tests/test_scenario_accuracy.py::test_builtin_scenario_is_classified":
        "`headroom run` child per scenario",
    "tests/test_scenario_fit.py::test_every_builtin_workload_fits_its_gpus_as_the_scenario_intends[real-load]":
        "the scenario's stand-in processes",
    "tests/test_serving.py::test_a_profile_without_endpoint_finds_its_runtime_by_command_line":
        "a Python child process",
    "tests/test_serving.py::test_promtool_accepts_the_serving_golden_file":
        "promtool",
    "tests/test_serving.py::test_the_agent_reports_a_bad_endpoint_in_status_log_and_metrics":
        "`headroom run` child",
    "tests/test_simulation.py::test_attach_lists_real_processes_by_pid_file_and_cmdline_on_their_gpus":
        "sleeping processes to attach to",
    "tests/test_simulation_machine.py::test_a_real_process_that_matches_the_rule_is_not_counted":
        "a Python child process",
    "tests/test_simulation_machine.py::test_every_builtin_scenario_shows_its_own_workloads_and_no_warning":
        "the simulation's stand-in processes",
    "tests/test_simulation_machine.py::test_every_scenario_gives_the_same_verdicts_idle_and_under_a_cpu_hog":
        "a CPU hog process",
    "tests/test_suite_config.py::test_a_test_that_starts_a_process_and_is_not_listed_external_fails_in_every_run":
        "a pytest child",
    "tests/test_suite_config.py::test_make_help_lists_every_target_with_its_description":
        "make",
    "tests/test_suite_config.py::test_the_seed_is_printed_and_orders_the_tests_the_same_with_workers_or_without":
        "pytest children",
    "tests/test_verdict_actions.py::test_snapshot_of_the_demo_says_what_is_pending_and_the_capacity_from_the_runtime":
        "`headroom snapshot` child",
    "tests/test_verdict_actions.py::test_the_sampler_logs_the_remedy_with_bottleneck_changed":
        "`headroom snapshot` child",
    "tests/test_words.py::test_health_says_degraded_in_the_status_too_and_started_names_the_workloads":
        "`headroom run` children",
}

SLOW: dict[str, str] = {
    # measured: `pytest -n 2 --durations=0 -m "not external"` on the 2-core machine (in-process, no process started)
    "tests/test_probe.py::test_an_open_loop_rate_that_overfills_the_standin_queues_and_breaks_ttft": "23 s",
    "tests/test_probe.py::test_a_ramp_on_the_standin_breaks_at_the_first_step_beyond_its_kv_cache": "14 s",
    "tests/test_probe.py::test_a_profiles_load_and_slo_drive_the_probe_and_flags_override_them": "13 s",
    "tests/test_probe.py::test_a_client_short_of_cpu_says_so_in_every_step": "12 s",
    "tests/test_probe.py::test_the_command_prints_the_table_writes_json_and_keeps_the_last_result": "8 s",
    "tests/test_probe.py::test_chat_completions_report_the_true_prompt_length_the_runtime_counted": "2.6 s",
    "tests/test_probe.py::test_prompts_are_text_of_the_exact_token_length_the_runtime_counts": "1.7 s",
    "tests/test_probe.py::test_a_watch_the_probe_made_itself_is_closed_with_it": "1.6 s",
    "tests/test_simulation_machine.py::test_every_builtin_scenario_shows_its_own_workloads_and_no_warning":
        "0.5-1 s per built-in scenario",
    "tests/test_simulation_machine.py::test_a_host_without_psi_gets_the_same_verdict": "0.5-1 s per scenario",
    "tests/test_hostile_traces.py::test_every_sample_type_round_trips": "3.9 s",
    "tests/test_hostile_traces.py::test_40_lines_near_the_cap_are_refused_or_replayed_in_bounded_time_and_memory":
        "2.1 s",
    "tests/test_hostile_traces.py::test_fuzzed_traces_replay_or_fail_with_file_and_line": "2.1 s of hypothesis",
    "tests/test_identity.py::test_a_huge_job_mapping_directory_is_bounded": "a huge directory tree: 4 s",
    "tests/test_fuzz_config.py::test_mutated_valid_configs_load_or_fail_with_positions": "2.2 s of hypothesis",
    "tests/test_fuzz_config.py::test_text_edits_of_the_example_config": "2.2 s of hypothesis",
    "tests/test_real_dataloader.py": "real torch DataLoader workers (was pytestmark = slow in the file)",
    "tests/test_real_probe.py": "the probe against a real vLLM server (was pytestmark = slow in the file)",
    "tests/test_faults.py": "each test drives an in-process agent through a fault and its recovery: 1.5-6 s",
    "tests/test_hostile_http.py::test_a_prometheus_keep_alive_connection_survives_a_15_second_scrape_interval":
        "waits out a 15 s scrape interval",
    "tests/test_hostile_http.py::test_clients_that_do_not_read_their_answers_make_room_before_anyone_is_refused":
        "14 s of clients that do not read",
    "tests/test_hostile_http.py::test_a_new_client_is_served_while_1000_slow_connections_are_held":
        "1000 slow connections: 7 s",
    "tests/test_hostile_http.py::test_fuzzed_requests_get_well_formed_answers_and_never_break_the_server":
        "hypothesis-fuzzed requests: 2 s",
    "tests/test_hostile_serving.py::test_an_endpoint_whose_answers_cost_cpu_is_read_less_often": "2 s of reads",
    "tests/test_scenario_fit.py::test_every_builtin_workload_fits_its_gpus_as_the_scenario_intends":
        "0.5-1 s per built-in scenario, 20 of them",
    "tests/test_probe_hostile.py::test_a_failing_endpoint_aborts_the_step_with_its_error_class_and_a_partial_result":
        "each failure waits out its timeout: 0.6-3.6 s per parameter",
}


def lane_key(item: pytest.Item) -> tuple[str, str]:
    """(path from the repository root, test name without parameters) of a collected test."""
    path = item.path.relative_to(item.config.rootpath).as_posix()
    name = item.nodeid.split("::", 1)[1].split("[", 1)[0] if "::" in item.nodeid else ""
    return path, name


def listed(table: dict[str, str], item: pytest.Item) -> bool:
    path, name = lane_key(item)
    return path in table or f"{path}::{name}" in table or f"{path}::{item.nodeid.split('::', 1)[-1]}" in table


def pytest_collection_modifyitems(config, items):
    for item in items:
        if listed(EXTERNAL, item):
            item.add_marker(pytest.mark.external)
        if listed(SLOW, item):
            item.add_marker(pytest.mark.slow)


# ------------------------------------------------------------------ the guard
# Every way a test can start a process ends in one of these (subprocess.run/check_output/os.popen/asyncio's
# subprocesses go through Popen._execute_child, multiprocessing's spawn and forkserver through spawnv_passfds).
_STARTERS = [(subprocess.Popen, "_execute_child"), (os, "fork"), (os, "forkpty"), (os, "posix_spawn"),
             (os, "posix_spawnp"), (os, "system"), (multiprocessing.util, "spawnv_passfds")]
_STARTED = pytest.StashKey[list]()


class ProcessOutsideTheList(RuntimeError):
    pass


def _refuse(item: pytest.Item, owner: object, name: str):
    def refused(*args, **kwargs):
        what = name
        if name == "_execute_child" and len(args) > 1:  # (self, args, executable, ...)
            argv = args[1]
            what = " ".join(map(str, argv))[:200] if isinstance(argv, list | tuple) else str(argv)[:200]
        item.stash[_STARTED].append(what)
        raise ProcessOutsideTheList(
            f"{item.nodeid} started a process ({what}) but is not in EXTERNAL of tests/lanes.py: add it there "
            "(with why), so that `make check`, which runs only tests that start none, leaves it out")

    return refused


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if item.get_closest_marker("external") is not None:
        yield
        return
    item.stash[_STARTED] = []
    saved = [(owner, name, getattr(owner, name)) for owner, name in _STARTERS if hasattr(owner, name)]
    for owner, name, _ in saved:
        setattr(owner, name, _refuse(item, owner, name))
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that started a process fails even where the code it ran caught the refusal."""
    outcome = yield
    started = item.stash.get(_STARTED, None)
    if not started:
        return
    report = outcome.get_result()
    if not report.failed:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} started {len(started)} process(es) ({'; '.join(started)[:400]}) but is "
                           "not in EXTERNAL of tests/lanes.py: add it there (with why); `make check` runs only "
                           "tests that start none")
    started.clear()

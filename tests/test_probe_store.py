"""probe/store.py: the last probe result on disk, saved atomically and loaded without trusting the file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from headroom.probe import store

FIXTURES = Path(__file__).parent / "fixtures" / "probe"


def fixture(name: str = "kv-bound") -> dict:
    """A hand-written result in the contract's format (tests/fixtures/probe/README.md), not a measurement."""
    return json.loads((FIXTURES / f"{name}.json").read_text())


def test_save_then_load_gives_the_result_back(tmp_path):
    result = fixture()
    path = store.save(result, tmp_path / "state")
    assert path == tmp_path / "state" / store.FILENAME
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert oct((tmp_path / "state").stat().st_mode & 0o777) == "0o700"
    back = store.load(tmp_path / "state")
    assert back["capacity"] == result["capacity"]
    assert [s["level"] for s in back["steps"]] == [1, 2, 4, 8]
    assert back["steps"][3]["host"]["peaks"]["kv_cache_usage_ratio"] == 0.97
    assert not [p for p in (tmp_path / "state").iterdir() if p.name != store.FILENAME]  # no temporary file left


def test_what_the_engine_writes_beside_the_contract_survives_the_save(tmp_path):
    """The host's per-resource scores and evidence (what the engine judged rose with the load), its poll errors,
    and how the prompt lengths were made, are kept in the agent's copy: the landing page's answer reads them."""
    result = fixture()
    result["lengths"] = "exact token ids (the runtime's /tokenize)"
    host = result["steps"][3]["host"]
    host.update(scores={"kv_cache": 0.93, "cpu": 0.4}, evidence_by={"kv_cache": "KV cache 97 % used"}, errors=2)
    back = store.load(store.save(result, tmp_path).parent)
    assert back["lengths"] == result["lengths"]
    assert back["steps"][3]["host"]["scores"] == {"kv_cache": 0.93, "cpu": 0.4}
    assert back["steps"][3]["host"]["evidence_by"] == {"kv_cache": "KV cache 97 % used"}
    assert back["steps"][3]["host"]["errors"] == 2


def test_load_without_a_file_is_none(tmp_path):
    assert store.load(tmp_path) is None


def test_save_replaces_atomically_a_reader_never_sees_half_a_file(tmp_path):
    """A reader polling while another process saves 200 times sees the old or the new result, never a torn one."""
    store.save(fixture(), tmp_path)
    writer = subprocess.Popen([sys.executable, "-c", (
        "import json, sys; from headroom.probe import store\n"
        f"r = json.load(open({str(FIXTURES / 'kv-bound.json')!r}))\n"
        "for i in range(200):\n"
        "    r['message'] = 'x' * (i * 37 % 1500)\n"
        f"    store.save(r, {str(tmp_path)!r})\n")])
    reads = 0
    while writer.poll() is None or reads == 0:
        assert store.load(tmp_path)["version"] == 1
        reads += 1
    assert writer.returncode == 0
    assert reads > 1


@pytest.mark.parametrize(("content", "reason"), [
    (b"{", "not valid JSON"),
    (b"\xff\xfe", "not UTF-8"),
    (b'{"version": 2}', "version: expected 1"),
    (b"[]", "expected an object"),
    (b'{"version": 1, "started_at": NaN}', "NaN is not a number JSON allows"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
])
def test_a_corrupt_file_gives_one_line_naming_it(tmp_path, content, reason):
    (tmp_path / store.FILENAME).write_bytes(content)
    with pytest.raises(store.StoreError) as err:
        store.load(tmp_path)
    text = str(err.value)
    assert reason in text and str(tmp_path / store.FILENAME) in text
    assert "\n" not in text and len(text) < 400


def _hostile(mutate) -> dict:
    r = fixture()
    mutate(r)
    return r


@pytest.mark.parametrize(("result", "reason"), [
    (_hostile(lambda r: r["steps"][0].update(level="8")), "steps[0].level: expected a number"),
    (_hostile(lambda r: r["steps"][0]["ttft"].update(p95=-1)), "steps[0].ttft.p95: must be at least 0"),
    (_hostile(lambda r: r.update(steps=[r["steps"][0]] * (store.MAX_STEPS + 1))), "more than 256"),
    (_hostile(lambda r: r["capacity"].update(bound_by='kv"}<script>')), "capacity.bound_by: expected a resource"),
    (_hostile(lambda r: r.update(schedule="burst")), "schedule: expected one of concurrency, rate"),
    (_hostile(lambda r: r["steps"][1]["host"].update(source="guess")), "steps[1].host.source"),
    (_hostile(lambda r: r["steps"][1]["host"]["peaks"].update({"a b": 1})), "peaks key"),
    (_hostile(lambda r: r.update(finished_at=True)), "finished_at: expected a number"),
])
def test_a_hostile_result_is_refused_with_the_field_named(tmp_path, result, reason):
    (tmp_path / store.FILENAME).write_text(json.dumps(result))
    with pytest.raises(store.StoreError) as err:
        store.load(tmp_path)
    assert reason in str(err.value)
    with pytest.raises(store.StoreError):  # and save refuses what load would
        store.save(result, tmp_path / "other")


def test_long_strings_are_clipped_and_unknown_keys_dropped(tmp_path):
    r = fixture()
    r["message"] = "m" * 100_000
    r["capacity"]["evidence"] = "e" * 50_000
    r["steps"][0]["extra"] = {"anything": [1, 2, 3]}
    r["injected"] = "x"
    back = store.load(Path(store.save(r, tmp_path)).parent)
    assert store.MAX_TEXT <= len(back["message"]) < store.MAX_TEXT + 40  # clip() says how much it left out
    assert len(back["capacity"]["evidence"]) < store.MAX_TEXT + 40
    assert "injected" not in back and "extra" not in back["steps"][0]


def test_a_file_too_large_is_refused_before_it_is_parsed(tmp_path):
    (tmp_path / store.FILENAME).write_bytes(b" " * (store.MAX_RESULT_BYTES + 1))
    with pytest.raises(store.StoreError, match="larger than"):
        store.load(tmp_path)


def test_a_symlink_or_a_fifo_is_not_read(tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps(fixture()))
    (tmp_path / store.FILENAME).symlink_to(target)
    with pytest.raises(store.StoreError, match="symbolic link"):
        store.load(tmp_path)
    other = tmp_path / "fifo"
    other.mkdir()
    os.mkfifo(other / store.FILENAME)
    with pytest.raises(store.StoreError, match="not a regular file"):  # and it does not block on the FIFO
        store.load(other)


def test_save_where_it_cannot_write_says_what_to_do(tmp_path):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(store.StoreError) as err:  # (a path under a file: refused for root too)
        store.save(fixture(), tmp_path / "a-file" / "state")
    assert "cannot write" in str(err.value) and "Not a directory" in str(err.value)
    assert "--state.dir" in str(err.value) and "\n" not in str(err.value)


def test_last_result_rereads_only_when_the_file_changes(tmp_path):
    watch = store.LastResult(tmp_path)
    assert watch.get() is None and watch.error is None
    store.save(fixture(), tmp_path)
    first = watch.get()
    assert first["capacity"]["concurrency"] == 4
    assert watch.get() is first  # unchanged file: the same object, not parsed again
    r = fixture()
    r["capacity"]["concurrency"] = 6
    store.save(r, tmp_path)
    assert watch.get()["capacity"]["concurrency"] == 6
    (tmp_path / store.FILENAME).write_text("{broken")
    assert watch.get() is None and "not valid JSON" in watch.error
    (tmp_path / store.FILENAME).unlink()
    assert watch.get() is None and watch.error is None


def test_state_dir_flag_then_systemd_then_default():
    assert store.state_dir("/srv/h", environ={"STATE_DIRECTORY": "/var/lib/x"}) == Path("/srv/h")
    assert store.state_dir(None, environ={"STATE_DIRECTORY": "/var/lib/headroom:/var/lib/other"}) == \
        Path("/var/lib/headroom")
    assert store.state_dir(None, environ={}) == Path(store.DEFAULT_STATE_DIR)
    sim = store.state_dir(None, simulate=True, environ={})
    assert sim.name == f"headroom-{os.getuid()}" and str(sim) != store.DEFAULT_STATE_DIR

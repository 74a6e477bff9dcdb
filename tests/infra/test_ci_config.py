"""The workflows, the images and the noxfile agree: every session a workflow calls exists, GPU
jobs run only on self-hosted GPU labels inside the GPU image, actions are pinned by SHA, and
the images install the versions the noxfile tests."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="pyyaml is installed by the nox tests session")

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def nox_sessions() -> set:
    cmd = [sys.executable, "-m", "nox", "-l", "--json", "-t", "quick", "gpu", "full", "-f", str(ROOT / "noxfile.py")]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
    data = json.loads(out.stdout)
    return {s["session"] for s in data} | {s["name"] for s in data}


def load(p):
    return yaml.load(p.read_text(), Loader=yaml.BaseLoader)  # BaseLoader: "on" stays a string


def steps(wf):
    for name, job in wf["jobs"].items():
        for step in job.get("steps", []):
            yield name, job, step


def test_workflows_exist():
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "gpu.yml", "release-validation.yml"}


def test_every_nox_session_called_exists():
    sessions = nox_sessions()
    called = []
    runs = [step.get("run", "") for p in WORKFLOWS for _, _, step in steps(load(p))]
    runs += [p.read_text() for p in (ROOT / ".github" / "scripts").glob("*.sh")]  # the job scripts
    for run in runs:
        for m in re.finditer(r"nox (?:--no-venv )?-s \"?([a-z_]+)", run):
            called.append(m.group(1))
    assert called, "the workflows call no nox session"
    for c in called:
        assert c in sessions, f"workflow calls nox session {c!r}, which the noxfile lacks"


def test_gpu_jobs_only_on_self_hosted_gpu_runners_in_the_image():
    from importlib import util

    spec = util.spec_from_file_location("gpu_matrix", ROOT / ".github" / "scripts" / "gpu_matrix.py")
    mod = util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for labels in mod.RUNNERS.values():
        assert labels[0] == "self-hosted" and labels[-1] in ("h100", "b200")
    for p in WORKFLOWS:
        for name, job in load(p)["jobs"].items():
            runs_on = json.dumps(job.get("runs-on"))
            text = json.dumps(job)
            uses_gpu = "--gpus all" in text or "self-hosted" in runs_on or "matrix.runner" in runs_on
            if not uses_gpu:
                assert "ubuntu" in runs_on, (p.name, name)
                continue
            # the GPU image by digest, resolved from the images workflow's build of these inputs
            assert "container" in job and job["container"]["image"].startswith("${{ needs.image.outputs.ref }}"), \
                (p.name, name)
            assert "image" in job["needs"], (p.name, name)
            assert job["container"]["options"] == "--gpus all", (p.name, name)
            assert "environment" in job, f"{p.name}:{name}: self-hosted jobs need an approval environment"
            if "matrix.runner" in runs_on and "include" in json.dumps(job["strategy"]["matrix"]):
                for inc in job["strategy"]["matrix"]["include"]:
                    assert inc["runner"][0] == "self-hosted"


def test_actions_pinned_and_permissions_least_privilege():
    for p in WORKFLOWS:
        wf = load(p)
        assert wf.get("permissions") == {"contents": "read"}, p.name
        assert "concurrency" in wf, p.name
        for _, _job, step in steps(wf):
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", step["uses"]), step["uses"]
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] == "false"
        if "pull_request" in wf["on"]:
            assert "pull_request_target" not in wf["on"]


def test_images_install_what_the_noxfile_tests():
    nox_src = (ROOT / "noxfile.py").read_text()
    dsl = re.search(r'DSL_NEWEST = "([\d.]+)"', nox_src).group(1)
    torch_cpu = re.search(r'"CUTEDSL_TORCH", "torch==([\d.]+)"', nox_src).group(1)
    gpu = (ROOT / "docker" / "Dockerfile.gpu").read_text()
    cpu = (ROOT / "docker" / "Dockerfile.cpu").read_text()
    for text in (gpu, cpu):
        assert "USER 1000" in text  # non-root
    assert f"ARG DSL_VERSION={dsl}" in cpu
    assert 'nvidia-cutlass-dsl-libs-cu13==${DSL_VERSION}' in cpu and "--force-reinstall" in cpu
    # the GPU image: the hash lock of requirements/gpu.txt, the cu13 libs last (test_requirements.py)
    assert f"nvidia-cutlass-dsl=={dsl} " in (ROOT / "requirements" / "gpu.lock").read_text()
    assert "--force-reinstall -r requirements/gpu-cu13.lock" in gpu
    assert f"ARG TORCH_VERSION={torch_cpu}" in cpu
    assert "ARG TORCH_VERSION=2.11.0" in gpu  # the oldest torch we support, as on the H200
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "torch>=2.11" in pyproject and "nvidia-cutlass-dsl[cu13]>=4.8.0,<4.9" in pyproject
    # the commands the images run exist
    from cutedsl_backend.cli import main

    with pytest.raises(SystemExit):
        main(["precompile", "--help"])
    assert "validate" in nox_sessions()


def test_every_gpu_test_belongs_to_one_nox_gpu_cell():
    """The nox gpu sessions (arch x dtype x epilogue family) together select every GPU test
    exactly once: none is left out of CI by the filters."""
    import re
    import subprocess
    import sys

    from cutedsl_backend.validation.matrix import GPU_TEST_CELLS

    def collected(*args):
        out = subprocess.run([sys.executable, "-m", "pytest", "tests/gpu", "--collect-only", "-q", "-p",
                              "no:cacheprovider", *args], capture_output=True, text=True, check=False).stdout
        return {line for line in out.splitlines() if re.match(r"tests/gpu/\S+::", line)}

    everything = collected()
    assert everything
    seen: list = []
    for arch in ("sm90", "sm100"):
        for dtype, family in GPU_TEST_CELLS:
            seen += collected("--arch-filter", arch, "--dtype-filter", dtype, "--epilogue-filter", family)
    assert sorted(seen) == sorted(everything)


def _command_names():
    from cutedsl_backend.cli import COMMANDS

    return [c.name for c in COMMANDS]


@pytest.mark.parametrize("cmd", _command_names())
def test_every_command_has_help(cmd, capsys):
    """Every command, the probes and sweeps behind config choices included (no loose scripts),
    answers --help."""
    from cutedsl_backend.cli import main

    with pytest.raises(SystemExit) as e:
        main([cmd, "--help"])
    assert e.value.code == 0
    assert "usage:" in capsys.readouterr().out
    assert not (ROOT / "scripts").exists()


def _gpu_matrix_module():
    from importlib import util

    spec = util.spec_from_file_location("gpu_matrix", ROOT / ".github" / "scripts" / "gpu_matrix.py")
    mod = util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_matrix_runs_only_the_kinds_with_runners_and_names_the_rest():
    mod = _gpu_matrix_module()
    sessions = [{"session": f"gpu(dtype='bfloat16', epilogue='none', arch='{a}')", "tags": ["gpu"]}
                for a in ("sm90a", "sm100a")] + [{"session": "bench", "tags": ["gpu"]}]
    mat, not_run = mod.matrix(sessions, ["sm90a"])
    assert [i["arch"] for i in mat["include"]] == ["sm90a"] and not_run == ["sm100a"]
    mat, not_run = mod.matrix(sessions, ["sm90a", "sm100a"])
    assert len(mat["include"]) == 2 and not_run == []


def test_gpu_workflow_gates_forks_by_review_and_dispatch_by_protection():
    wf = load(ROOT / ".github" / "workflows" / "gpu.yml")
    gpu = wf["jobs"]["gpu"]
    assert "if" not in gpu, "a skipped job reads as success: forks wait for the environment's reviewers instead"
    assert "pull_request" in gpu["environment"] and "gpu-runners" in gpu["environment"]
    assert "github.ref_protected" in wf["jobs"]["sessions"]["if"]
    assert any(".github/scripts/gpu-job.sh" in step.get("run", "") for step in gpu["steps"])
    assert "not_run" in json.dumps(wf["jobs"]["not-run"]) and "no runner" in json.dumps(wf["jobs"]["not-run"])
    assert "vars.GPU_KINDS" in json.dumps(wf["jobs"]["sessions"])


def test_gpu_job_script_requires_the_gpu_and_fails_on_any_failed_step():
    text = (ROOT / ".github" / "scripts" / "gpu-job.sh").read_text()
    assert "--require-gpu" in text and "status=1" in text and 'exit "${status}"' in text
    assert (ROOT / ".github" / "scripts" / "gpu-job.sh").stat().st_mode & 0o111
    out = subprocess.run(["bash", "-n", str(ROOT / ".github" / "scripts" / "gpu-job.sh")], capture_output=True)
    assert out.returncode == 0, out.stderr


def test_gpu_job_script_runs_a_named_part_and_refuses_an_unknown_one():
    """GPU_JOB_STEPS splits the job over two leases ("tests", then "validate"); a misspelt step
    must fail, not run nothing and exit 0."""
    import os

    script = ROOT / ".github" / "scripts" / "gpu-job.sh"
    out = subprocess.run(["bash", str(script), "sm90a"], capture_output=True, text=True,
                         env={**os.environ, "GPU_JOB_STEPS": "tests,valdiate"})
    assert out.returncode == 2 and "each step is tests or validate" in out.stderr
    text = script.read_text()
    assert ',${steps},' in text and "*,tests,*" in text and "*,validate,*" in text


def test_images_are_built_by_ci_and_run_by_digest():
    """images.yml builds both images, tags them by commit and by the hash of their inputs, and
    records digests; the GPU workflows resolve the same inputs tag to a digest (the same hashFiles
    expression everywhere, or they would look for an image nobody built)."""
    images = load(ROOT / ".github" / "workflows" / "images.yml")
    build = images["jobs"]["build"]
    assert build["permissions"] == {"contents": "read", "packages": "write"}
    assert set(build["strategy"]["matrix"]["kind"]) == {"cpu", "gpu"}
    script = (ROOT / ".github" / "scripts" / "build-image.sh").read_text()
    assert ":sha-${SHA}" in script and ":inputs-${inputs}" in script and "RepoDigests" in script

    def inputs_expr(job):
        return [st["env"]["INPUTS"] for st in job["steps"] if "INPUTS" in st.get("env", {})]

    expected = inputs_expr(build)
    assert expected and "docker/**" in expected[0] and "cutedsl_backend/**" in expected[0]
    for wf in ("gpu.yml", "release-validation.yml"):
        job = load(ROOT / ".github" / "workflows" / wf)["jobs"]["image"]
        assert inputs_expr(job) == expected, wf
        assert job["permissions"] == {"contents": "read", "packages": "read"}
        assert any("resolve-image.sh" in st.get("run", "") for st in job["steps"])
    resolve = (ROOT / ".github" / "scripts" / "resolve-image.sh").read_text()
    assert "inputs-${INPUTS:0:16}" in resolve and '@$(echo "${digest}"' in resolve


def test_base_images_are_pinned_by_digest():
    """Every FROM of the Dockerfiles names a base image by its sha256 digest (directly or through an
    ARG whose default does), or an earlier stage of the same file."""
    for dockerfile in sorted((ROOT / "docker").glob("Dockerfile*")):
        text = dockerfile.read_text()
        args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))
        stages = set(re.findall(r"^FROM \S+ AS (\w+)", text, re.M | re.I))
        froms = re.findall(r"^FROM (\S+)", text, re.M)
        assert froms, dockerfile
        for image in froms:
            ref = re.fullmatch(r"\$\{?(\w+)\}?", image)
            image = args.get(ref.group(1), image) if ref else image
            if image in stages:
                continue
            assert re.search(r"@sha256:[0-9a-f]{64}$", image), f"{dockerfile.name}: FROM {image} not pinned by digest"


def test_every_command_says_whether_it_needs_a_gpu(capsys, monkeypatch):
    """Each CLI command is either GPU-only or runs anywhere; without a CUDA device a GPU-only
    command exits 2 with a sentence naming what it needs (not a traceback from deep in torch)."""
    import re

    import torch

    from cutedsl_backend.cli import CPU_COMMANDS, GPU_COMMANDS, main

    with pytest.raises(SystemExit):
        main(["--help"])
    listed = set(re.search(r"\{([a-z0-9,-]+)\}", capsys.readouterr().out).group(1).split(","))
    assert listed == GPU_COMMANDS | CPU_COMMANDS, listed ^ (GPU_COMMANDS | CPU_COMMANDS)
    assert not GPU_COMMANDS & CPU_COMMANDS
    # stated here, not derived: a command that runs kernels marked as CPU-only would crash in torch
    assert GPU_COMMANDS == {
        "bench", "bench-host", "sweep", "bench-epilogue", "bench-fp8", "sweep-epilogue", "sweep-fp8", "bench-inductor",
        "sweep-shapes", "sweep-decode", "tune", "sweep-gated", "probe-power", "probe-tiles", "probe-epilogue", "fuzz",
        "probe-bandwidth", "probe-peer", "probe-padding", "probe-configs"}, GPU_COMMANDS
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    required = {"tune": ["--out", "unused"], "probe-tiles": ["clusters"], "probe-configs": ["--shapes", "1x64x64"]}
    for cmd in sorted(GPU_COMMANDS):
        assert main([cmd, *required.get(cmd, [])]) == 2, cmd
        err = capsys.readouterr().err
        assert f"cutedsl_backend {cmd}: needs a CUDA GPU" in err and "Traceback" not in err, err

"""enable()/disable() install and restore exactly what they say, keep a user's post-grad pass,
and take effect in a thread that already compiled something."""

import pytest

torch = pytest.importorskip("torch")

import cutedsl_backend.inductor as cbi  # noqa: E402

from .conftest import as_sm90a, compile_and_code, rand  # noqa: E402


@pytest.fixture
def clean():
    import torch._inductor.config as config
    from torch._inductor import virtualized

    cbi.disable()
    before = (config.inductor_choices_class, config.post_grad_custom_post_pass,
              virtualized._choices._get_handler(False))
    yield before
    cbi.disable()
    config.post_grad_custom_post_pass = before[1]


def test_enable_then_disable_restores(clean):
    import torch._inductor.config as config
    from torch._inductor import virtualized

    from cutedsl_backend.inductor.choices import CuteDSLChoices
    from cutedsl_backend.inductor.fusion import FusionPass

    cbi.enable(device_arch=as_sm90a)
    assert cbi.is_enabled()
    assert isinstance(virtualized._choices._get_handler(False), CuteDSLChoices)
    assert isinstance(config.post_grad_custom_post_pass, FusionPass)
    assert isinstance(config.inductor_choices_class(), CuteDSLChoices)
    assert config.inductor_choices_class().uuid().startswith("cutedsl-")
    cbi.enable(device_arch=as_sm90a, top_k=2)  # idempotent: options update, nothing stacks
    assert isinstance(config.post_grad_custom_post_pass, FusionPass)
    cbi.disable()
    assert not cbi.is_enabled()
    assert (config.inductor_choices_class, config.post_grad_custom_post_pass) == clean[:2]
    assert not isinstance(virtualized._choices._get_handler(False), CuteDSLChoices)


def test_user_post_grad_pass_is_kept(clean):
    import torch._inductor.config as config
    from torch._inductor.custom_graph_pass import CustomGraphPass

    seen = []

    class UserPass(CustomGraphPass):
        def __call__(self, graph):
            seen.append(len(graph.nodes))

        def uuid(self):
            return "user-pass-1"

    user = UserPass()
    config.post_grad_custom_post_pass = user
    cbi.enable(device_arch=as_sm90a)
    chained = config.post_grad_custom_post_pass
    from cutedsl_backend.inductor.choices import settings_tag

    assert chained.uuid() == ("user-pass-1", f"cutedsl-fusion-{cbi.state.build_tag()}-{settings_tag()}")
    chained(torch.fx.Graph())
    assert seen == [0]
    cbi.disable()
    assert config.post_grad_custom_post_pass is user


def test_list_of_passes_gets_ours_appended(clean):
    import torch._inductor.config as config

    from cutedsl_backend.inductor.fusion import FusionPass

    config.post_grad_custom_post_pass = []
    cbi.enable(device_arch=as_sm90a)
    assert [type(p) for p in config.post_grad_custom_post_pass] == [FusionPass]
    cbi.disable()
    assert config.post_grad_custom_post_pass == []


def test_enable_after_an_earlier_compile(inductor, feedback):
    """Inductor caches its choices handler per thread: enable() must replace it, not only the
    config entry."""
    inductor.disable()
    a, b = rand(128, 64), rand(64, 96)
    compile_and_code(lambda a, b: a @ b, a, b)  # creates this thread's handler
    assert feedback.ours() == []
    torch._dynamo.reset()
    inductor.enable(device_arch=as_sm90a)
    compile_and_code(lambda a, b: a @ b, a, b)
    assert feedback.ours("mm")


def test_context_manager_and_bad_options(clean):
    with cbi.enabled(device_arch=as_sm90a, top_k=2):
        assert cbi.is_enabled() and cbi.state.STATE.top_k == 2
    assert not cbi.is_enabled()
    with pytest.raises(ValueError, match="ops"):
        cbi.enable(ops=("conv",))
    with pytest.raises(ValueError, match="top_k"):
        cbi.enable(top_k=0)
    assert not cbi.is_enabled()


def test_enable_does_not_start_the_dsl_runtime(clean, monkeypatch):
    """The compiling process's DSL start-up waits for the first kernel offered (a compile that
    needs none of ours pays nothing), not enable()."""
    from cutedsl_backend import background, compiler, disk_cache

    monkeypatch.setattr(disk_cache, "driver_available", lambda: True)
    monkeypatch.setattr(background, "_start_runtime", lambda: None)
    monkeypatch.setattr(compiler.STORE, "runtime_start", None)
    monkeypatch.setenv("CUTEDSL_PRECOMPILE_WORKERS", "0")
    cbi.enable(device_arch=as_sm90a)
    assert compiler.STORE.runtime_start is None


def test_cache_keys_carry_the_settings_that_change_our_code(monkeypatch):
    """Inductor's FX graph cache must not hand code built under one setting to a compile under
    another: the choices handler's and the fusion pass's uuid() change with them."""
    import torch._inductor.config as config

    from cutedsl_backend.inductor.choices import CuteDSLChoices
    from cutedsl_backend.inductor.fusion import FusionPass

    def keys():
        return CuteDSLChoices().uuid(), FusionPass().uuid()

    with config.patch(max_autotune_gemm_backends="ATEN,TRITON"):
        default = keys()
        assert keys() == default  # stable
    with config.patch(max_autotune_gemm_backends="TRITON"):  # a lost chain's GEMM then keeps Inductor's
        other = keys()
    assert other[0] != default[0] and other[1] != default[1]

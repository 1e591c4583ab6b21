"""A training step on a CUDA device that only claims to exist: devices, dtypes, host syncs.

`torch._subclasses.fake_tensor.FakeTensorMode` runs torch ops on tensors that carry a device,
a shape and a dtype but no data, so a CPU-only machine can run `lib.training.loop.fit` with every
tensor "on cuda:0". A tensor left on the CPU then fails as it would on a GPU ("Expected all
tensors to be on the same device"); a `Recorder` layered over the fake mode also notes what
a GPU would run but MPS or a TPU would reject or a GPU would stall on: float64 tensors on the
device and host synchronisations inside the per-batch loop. `dry_run` trains one step,
evaluates one batch, saves the epoch's checkpoint and resumes from it (a second epoch: one
more step after `_restore`), then fails with one line per finding not in `ALLOWED`
(tests/device_findings.py).

What fake mode cannot carry is stubbed at the narrowest point (tests/test_fake_cuda.py's
docstring lists each and why). The device is chosen by `lib.runtime.device.choose_device` from a
patched `lib.runtime.device.probe` (a T4, sm_75, or an A100, sm_80), never built by hand.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorConverter, FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import lib.runtime.device
from lib.runs.folder import RunFolder
from lib.runtime.device import Probe, choose_device
from lib.runtime.platforms import get_platform
from lib.training.loop import Task, fit
from tests.device_findings import (
    ALLOWED,
    CHECKPOINT,
    FLOAT64,
    SYNC,
    DryRunError,
    Finding,
    caller,
)

__all__ = ["A100", "ALLOWED", "CHECKPOINT", "FLOAT64", "SYNC", "T4", "DryRunError", "Finding",
           "Recorder", "Replay", "Watched", "cuda_choice", "dry_run", "fake_cuda"]

aten = torch.ops.aten

T4 = Probe(cuda=True, cuda_name="Tesla T4", capability=(7, 5),
           arch_list=("sm_75", "sm_80", "sm_86", "sm_90"), cuda_count=1)
A100 = Probe(cuda=True, cuda_name="NVIDIA A100-SXM4-40GB", capability=(8, 0),
             arch_list=("sm_75", "sm_80", "sm_86", "sm_90"), cuda_count=1)

PINNED = "_dry_run_pinned"  # pin_memory()'s mark, read by is_pinned()
ORIGIN = "_dry_run_origin"  # where a CPU tensor was made: "aten.zeros at lib/x.py:3 in f"


def _tensors(tree) -> list[torch.Tensor]:
    """The tensors of an op's arguments or outputs (nested lists, tuples, dicts)."""
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, dict):
        tree = tree.values()
    elif not isinstance(tree, (list, tuple)):
        return []
    return [t for item in tree for t in _tensors(item)]


def _is_device(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "cuda"


@dataclass
class Recorder(TorchDispatchMode):
    """Notes float64 device tensors always, host syncs inside the batch loop (`in_loop`) and
    where every CPU tensor was made (`ORIGIN`), which it names when a CPU tensor meets a
    device one. Host reads return placeholders (0, False, CPU tensors of ones): fake tensors
    have no values (0: GradScaler's found_inf then lets the optimizer step)."""

    findings: list[Finding] = field(default_factory=list)
    in_loop: bool = False
    host_real: bool = True  # False while a task is built: its modules need no values

    def __post_init__(self) -> None:
        super().__init__()

    @contextlib.contextmanager
    def building(self):
        """Modules built inside need no values: their initialisation stays fake."""
        self.host_real = False
        try:
            yield
        finally:
            self.host_real = True

    def note(self, kind: str, what: str) -> None:
        finding = Finding(kind, what, *caller())
        if finding not in self.findings:
            self.findings.append(finding)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        ins = _tensors((args, kwargs))
        if func is aten._local_scalar_dense.default and _is_device(args[0]):
            if self.in_loop:
                self.note(SYNC, f"a Python number read from a {args[0].device} tensor "
                                "(.item(), float(), int(), bool())")
            return False if args[0].dtype == torch.bool else 0
        if func in (aten._to_copy.default, aten.copy_.default):
            self._copy(func, args, kwargs)
        if func is aten._pin_memory.default:  # page-locked memory needs a CUDA driver
            out = args[0].clone()
            setattr(out, PINNED, True)
            return out
        if func is aten.is_pinned.default:
            return getattr(args[0], PINNED, False)
        if func is aten.bincount.default and isinstance(args[0], FakeTensor):
            # Its length is max + 1 of the values, read on the host (CUDA's kernel: min and
            # max, two syncs); fake tensors have no values: minlength.
            if self.in_loop and _is_device(args[0]):
                self.note(SYNC, "torch.bincount of a device tensor (its kernel reads the "
                                "input's min and max on the host to size the output)")
            n = args[2] if len(args) > 2 else kwargs.get("minlength", 0)
            dtype = torch.int64 if (args[1] if len(args) > 1 else kwargs.get("weights")) \
                is None else torch.float64
            return torch.zeros(n, dtype=dtype, device=args[0].device)
        if (self.host_real and not any(isinstance(t, FakeTensor) for t in ins)
                and getattr(kwargs.get("device"), "type", "cpu") == "cpu"):
            # Host work (samplers, augmentation draws, the RNG state) runs for real.
            with torch._subclasses.fake_tensor.unset_fake_temporarily():
                out = func(*args, **kwargs)
            self._outputs(func, out)
            return out
        if func is aten._to_copy.default and _is_device(args[0]) \
                and (kwargs.get("device") or args[0].device).type == "cpu":
            return self._host_copy(args[0], kwargs)
        try:
            out = func(*args, **kwargs)
        except RuntimeError as exc:
            if "device" in str(exc) and any(_is_device(t) for t in ins):
                raise DryRunError(self._mix_line(func, ins)) from exc
            raise
        self._outputs(func, out)
        return out

    def _copy(self, func, args, kwargs) -> None:
        """A copy between host and device inside the loop: to the host always waits for the
        GPU; to the device waits too unless non_blocking (cudaMemcpy + stream sync)."""
        if not self.in_loop:
            return
        if func is aten.copy_.default:
            dst, src, blocking = args[0], args[1], not (args[2] if len(args) > 2 else
                                                         kwargs.get("non_blocking", False))
        else:
            src, blocking = args[0], not kwargs.get("non_blocking", False)
            dst_device = kwargs.get("device") or src.device
            if dst_device.type == "cuda" and src.device.type == "cpu" and blocking:
                self.note(SYNC, "a blocking copy of a host tensor to the device (torch.tensor("
                                "..., device=...) or .to(device) without non_blocking)")
            if dst_device.type == "cpu" and _is_device(src):
                self.note(SYNC, f"a copy of a {src.device} tensor to the host (.cpu(), "
                                ".tolist(), .cpu().numpy())")
            return
        if _is_device(src) and dst.device.type == "cpu":
            self.note(SYNC, f"a copy of a {src.device} tensor to the host (copy_)")
        elif _is_device(dst) and src.device.type == "cpu" and blocking:
            self.note(SYNC, "a blocking copy of a host tensor to the device (copy_)")

    def _host_copy(self, src: torch.Tensor, kwargs) -> torch.Tensor:
        """What arrives on the host: a real tensor (ones: fake tensors carry no values)."""
        return _ones(src.shape, kwargs.get("dtype") or src.dtype)

    def _outputs(self, func, out) -> None:
        for t in _tensors(out):
            if t.device.type == "cpu" and not hasattr(t, ORIGIN):
                # an attribute, not a weak map: Module.to's swap_tensors refuses weakrefs
                file, line, function, _ = caller()
                with contextlib.suppress(AttributeError):
                    setattr(t, ORIGIN, f"aten.{func.__name__.split('.')[0]} at {file}:{line} "
                                       f"in {function}")
            elif _is_device(t) and t.dtype == torch.float64:
                self.note(FLOAT64, f"a float64 tensor made on {t.device} by aten."
                                   f"{func.__name__.split('.')[0]} (MPS cannot hold float64; "
                                   "a TPU emulates it slowly)")

    def _mix_line(self, func, ins: list[torch.Tensor]) -> str:
        file, line, function, code = caller()
        cpu = [t for t in ins if t.device.type == "cpu" and t.dim() > 0]
        cpu = cpu or [t for t in ins if t.device.type == "cpu"]
        made = [getattr(t, ORIGIN, None) or "outside the dry run (at import, or a real tensor)"
                for t in cpu]
        what = "; ".join(f"the cpu tensor {tuple(t.shape)} {t.dtype} was made by {m}"
                         for t, m in zip(cpu, made, strict=True))
        return (f"device mix: aten.{func.__name__} at {file}:{line} in {function} "
                f"({code.strip()}) got cpu and cuda tensors: {what}. Create it on the "
                "device (device=...), or register it as a buffer so .to(device) moves it.")

    def check(self, allowed=ALLOWED) -> list[Finding]:
        """The findings `allowed` accepts; raises DryRunError listing every other one."""
        bad = [f for f in self.findings if not any(a.matches(f) for a in allowed)]
        if bad:
            raise DryRunError("the fake-CUDA dry run found:\n" + "\n".join(map(str, bad)))
        return [f for f in self.findings if f not in bad]


class Printing(TorchFunctionMode):
    """Printing or formatting a device tensor inside the loop reads it on the host."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if (func in (torch.Tensor.__repr__, torch.Tensor.__str__, torch.Tensor.__format__)
                and self.recorder.in_loop and _is_device(args[0])):
            self.recorder.note(SYNC, f"printing a {args[0].device} tensor")
        return func(*args, **(kwargs or {}))


class Watched:
    """A loader whose iteration is "the loop": host syncs are findings while it runs."""

    def __init__(self, loader, recorder: Recorder) -> None:
        self.loader, self.recorder, self.passes = loader, recorder, 0
        self.batch_size, self.sampler = loader.batch_size, loader.sampler

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator:
        self.recorder.in_loop, self.passes = True, self.passes + 1
        try:
            yield from self.loader
        finally:
            self.recorder.in_loop = False


class _Sampler:
    def set_epoch(self, epoch: int, start: int = 0) -> None:
        pass


class Replay:
    """The DataLoader stand-in: the same real CPU batches every epoch (data loading is
    stubbed: workers and pinning need real tensors)."""

    def __init__(self, batches: list[list[torch.Tensor]]) -> None:
        self.batches, self.batch_size, self.sampler = batches, len(batches[0][-1]), _Sampler()

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        return iter([list(b) for b in self.batches])


def cuda_choice(p: Probe = T4, platform: str = "colab_t4"):
    """The DeviceChoice `lib.runtime.device.choose_device("auto", ...)` makes on a machine whose
    probe says `p` (the probe is patched, the choice is the real one)."""
    flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        with mock.patch.object(lib.runtime.device, "probe", return_value=p):
            choice = choose_device("auto", get_platform(platform), environ={})
    finally:  # choose_device turns TF32 on for an sm_80 GPU: this process has none
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags
    assert choice.type == "cuda", choice.describe()
    return choice


def _ones(shape, dtype) -> torch.Tensor:
    """A real CPU tensor of ones, one element expanded (a checkpoint of them stays small)."""
    with torch._subclasses.fake_tensor.unset_fake_temporarily():
        return torch.ones((), dtype=dtype).expand(shape)


def _fake_no_memo(self, fake_mode, t, device, pytype=None, dispatch_keys=None):
    """FakeTensorConverter.from_meta_and_device without its memo: the memo's weak reference
    to each new tensor makes Module.to's swap_tensors fail ("has weakref associated")."""
    return FakeTensor(fake_mode, t, device, pytype=pytype, dispatch_keys=dispatch_keys)


def _backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False,
              grad_variables=None, inputs=None):
    """torch.autograd.backward's stand-in: every leaf the graph reaches gets a zero gradient
    like itself (what AccumulateGrad makes: same device, dtype, shape)."""
    roots = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
    seen, todo = set(), [r.grad_fn for r in roots if r.grad_fn is not None]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        leaf = getattr(node, "variable", None)
        if leaf is not None and leaf.requires_grad and leaf.grad is None:
            leaf.grad = torch.zeros_like(leaf)
        todo.extend(n for n, _ in node.next_functions)


_real_save, _real_load = torch.save, torch.load


def _load(*args, **kwargs):
    """torch.load outside the fake mode (inside it, it makes fake tensors: the RNG state
    needs its bytes)."""
    with torch._subclasses.fake_tensor.unset_fake_temporarily():
        return _real_load(*args, **kwargs)


def _realise(obj, path: str, on_device: list[tuple[str, torch.device]]):
    """A checkpoint's fake tensors as real CPU ones (of ones); each device tensor's place in
    the state is added to `on_device` (it would reload only where that device exists)."""
    if isinstance(obj, torch.Tensor):
        if obj.device.type != "cpu":
            on_device.append((path, obj.device))
        if not isinstance(obj, FakeTensor):
            return obj
        return _ones(obj.shape, obj.dtype)
    if isinstance(obj, dict):
        return {k: _realise(v, f"{path}.{k}", on_device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_realise(v, f"{path}[{i}]", on_device) for i, v in enumerate(obj))
    return obj


def _stored_on_device(on_device: list[tuple[str, torch.device]]) -> str:
    devices = ", ".join(sorted({str(d) for _, d in on_device}))
    places = ", ".join(p for p, _ in on_device[:3]) + (", ..." if len(on_device) > 3 else "")
    return (f"{len(on_device)} tensor(s) saved on {devices} ({places}): torch.load puts them "
            "back there only; move the state to the CPU before torch.save")


@contextlib.contextmanager
def fake_cuda(recorder: Recorder | None = None):
    """FakeTensorMode with the stubs, the Recorder and the printing check; yields the
    Recorder. Modules built inside are fake CPU modules until `.to("cuda")`."""
    recorder = recorder or Recorder()

    def save(obj, f, *a, **kw):
        """torch.save of real tensors; device ones are a finding at the line that saved."""
        on_device = []
        real = _realise(obj, "state", on_device)
        if on_device:
            recorder.note(CHECKPOINT, _stored_on_device(on_device))
        return _real_save(real, f, *a, **kw)

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(FakeTensorConverter, "from_meta_and_device",
                                              _fake_no_memo))
        # autocast and GradScaler ask torch.cuda.is_available() through this one check
        stack.enter_context(mock.patch("torch.cuda.amp.common.amp_definitely_not_available",
                                       return_value=False))
        stack.enter_context(mock.patch("torch.cuda.is_bf16_supported", return_value=True))
        # the fused LIF op's dispatch rule (lib/kernels) asks for the compute capability: a
        # T4's, the least that takes the Triton path (its op traced through its fake outputs)
        stack.enter_context(mock.patch("torch.cuda.get_device_capability", return_value=(7, 5)))
        stack.enter_context(mock.patch("torch.autograd.backward", _backward))
        stack.enter_context(mock.patch("torch.save", save))
        stack.enter_context(mock.patch("torch.load", _load))
        stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
        stack.enter_context(recorder)
        stack.enter_context(Printing(recorder))
        yield recorder


def _on_the_device(task: Task) -> None:
    """After the resume: weights and optimizer state on the device (torch keeps the step
    counts of Adam-like optimizers on the CPU by design: 0-dim, skipped)."""
    for name, p in task.model.named_parameters():
        assert p.device.type == "cuda", f"parameter {name} is on {p.device} after the resume"
    for state in task.optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.dim():
                assert value.device.type == "cuda", f"optimizer state {key} on {value.device}"


@contextlib.contextmanager
def _findings_first(rec: Recorder, allowed):
    """When the run fails after findings (a placeholder value 0 divided by, say), the findings
    are the message; the failure is chained to it."""
    try:
        yield
    except DryRunError:
        raise
    except Exception as exc:
        try:
            rec.check(allowed)
        except DryRunError as found:
            raise DryRunError(f"{found}\nthen: {type(exc).__name__}: {exc}") from exc
        raise


def dry_run(build: Callable[[torch.device], tuple[Task, dict]], make_loaders, choice,
            out: Path, workload: str = "dry_run", allowed=ALLOWED) -> Recorder:
    """Epoch 1 (one step, one evaluation batch, a checkpoint), then a fresh task resumed
    from that checkpoint for epoch 2, all under fake CUDA; `build(device)` is a workload's
    build_task, `make_loaders(device)` its (train, eval) loaders. Raises
    DryRunError on a device mix or a finding not in `allowed`; returns the Recorder."""
    device = choice.torch_device
    with fake_cuda() as rec, _findings_first(rec, allowed):
        for epochs in (1, 2):
            with rec.building():
                task, model_config = build(device)
            train, test = make_loaders(device)
            run = RunFolder(out, workload, model_config, tensorboard=False, progress=False)
            train, test = Watched(train, rec), Watched(test, rec)
            try:
                history = fit(task, train, test, choice, run, epochs, max_batches=1)
            finally:
                run.close()
            assert [r["epoch"] for r in history] == list(range(1, epochs + 1)), history
            assert train.passes == test.passes == 1, "the second fit did not resume"
            _on_the_device(task)
    rec.check(allowed)
    return rec

"""Run schedules for real in PyTorch's pipelining runtime (``torch.distributed.pipelining``).

ppopt writes PyTorch schedule CSVs (:mod:`ppopt.io.torch_csv`); this package executes them on the
local machine and closes the loop between prediction and measurement:

* :mod:`ppopt.run.spec`     what to run: the model size and run settings (pure, no torch);
* :mod:`ppopt.run.launcher` starts one process per rank on 127.0.0.1 (gloo), waits with a timeout,
  and ends every rank with one clear line when one fails;
* :mod:`ppopt.run.worker`   one rank: builds its stages of a tiny GPT, loads the CSV into
  PyTorch's ``_PipelineScheduleRuntime``, times steps and ops, checks gradients;
* :mod:`ppopt.run.model`    the tiny GPT and its split into stages;
* :mod:`ppopt.run.execute`  checks and writes the schedules, launches once, summarises per schedule;
* :mod:`ppopt.run.profile`  measured F, I, W, B per stage and the message time, as ppopt
  :class:`~ppopt.costs.Costs` (a cost preset file, :mod:`ppopt.io.cost_preset`) for the simulator;
* :mod:`ppopt.run.compare`  measured step time next to the simulator's prediction.

torch is an optional dependency (the ``run`` extra); it is imported only inside the
worker processes and by :func:`require_torch`.
"""

from __future__ import annotations

from ppopt.errors import PpoptError

INSTALL_HINT = "this command needs PyTorch: pip install 'torch>=2.8' (ppopt's run extra)"


class RunError(PpoptError):
    """A run could not start or a rank failed; one line naming the rank and the reason."""


def require_torch() -> None:
    """Raise :class:`RunError` with the install line when torch (with distributed pipelining) is missing."""
    try:
        import torch.distributed.pipelining  # noqa: F401
    except ImportError:
        raise RunError(INSTALL_HINT) from None

"""A master for torchrun elastic jobs under colocate (master protocol v1.2), and the training
program its tests and the convergence experiment run.

- ``train``: DDP training on gloo (a Wide & Deep CTR model or an MLP classifier on synthetic
  teacher data), global batch held constant across world sizes, checkpoints every N steps and on
  demand, a stop request honoured at the next step.
- ``ledger``: the protocol's bookkeeping (generation, idempotent command ids, bounds), no I/O.
- ``coordinator``: one torchrun group per generation; a membership change stops the group at a
  step boundary (checkpoint first) and starts the next one, measuring what it costs.
- ``local_agents``: the backend that runs each worker's torchrun agent as a local process.
- ``http_api``: protocol v1 over HTTP.
"""

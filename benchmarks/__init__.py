"""Speed and memory benchmarks of dmlkit against references; not part of the installed package.

Run from the repository root as ``python -m benchmarks.NAME ...`` or ``dmlkit bench NAME ...`` (which needs
this source checkout). Each module has ``run(...)``, ``format_table(result)`` and ``main(argv) -> int``,
built on :mod:`benchmarks._harness` (worker subprocesses, peak memory, timing, tables):

* ``retrieval`` -- exact retrieval metrics against PML's ``AccuracyCalculator``;
* ``retrieval_large`` -- a gallery on disk, faiss IVF/HNSW against exact streamed search
  (also ``dmlkit bench retrieval --approx``);
* ``fastap`` -- closed-form FastAP gradient against PML's autograd ``FastAPLoss``;
* ``sft`` -- rank-2 spherical feature transform against the explicit matrix, and the training-step
  cost of SFT and its baselines (:mod:`benchmarks.sft_step`);
* ``ccp`` -- a CCP training step and proxy re-initialisation;
* ``gsp`` -- GSP closed-form gradient against unrolled autograd, and GSP against GAP in a training step;
* ``data`` -- images per second of the train loader;
* ``search`` -- faiss index modes, embedding throughput, server latency;
* ``ddp`` -- data-parallel steps per second with 1 and 2 processes.
"""

"""Coded policies for the pattern protocols of ``protocols/patterns/``.

Each is a plain function ``policy(move) -> bindings | None``
(:mod:`strabo.simulate.move`), named in a scenario as ``module:function``:

* :mod:`~strabo.simulate.policies.market`: the market coordinator, sellers
  (``fixed``, ``undercut``, ``follow``) and buyers (``cheapest``);
* :mod:`~strabo.simulate.policies.sequential`: the chair and the speakers;
* :mod:`~strabo.simulate.policies.broadcast`: the chair and the members;
* :mod:`~strabo.simulate.policies.queues`: the host and the members.

They decide from the enactment's history alone, so a run is the same each
time whatever the interleaving (the tests rely on it).
"""

"""The client's pure cores: state machines and bookkeeping with no processes, sockets or clocks of their own.

Runs in: whichever process hosts the actor (or app facade) that drives them; each module says which.
``connection`` (one broker connection's protocol state), ``metadata`` (the cache and leader routing),
``stats`` (librdkafka's statistics layout), ``producer/`` (batching, retries, idempotence), ``consumer/``
(the fetch pipeline) and ``group/`` (consumer-group protocols and assignors). The actors in
``kqactors.actors`` and the facades in ``kqactors.client`` wire them to ops; everything here is unit-tested
without a broker.
"""

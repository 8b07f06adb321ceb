#!/usr/bin/env python3
"""Create the AWS resources of the serverless stack, idempotently (what exists is kept).

THE one resource script: the local test stack (scripts/lambda-local) and a LocalStack init hook
both run it, so what LocalStack users get is what the tests use. Needs only boto3.

  table        NAME (default agentaddress): pk (S, HASH) + sk (S, RANGE), PAY_PER_REQUEST,
               TTL on attribute `ttl`
  dead-letter  QUEUE-dlq (messages kept 14 days)
  purge queue  QUEUE (default agentaddress-purge): VisibilityTimeout 60,
               RedrivePolicy maxReceiveCount 5 -> QUEUE-dlq

Endpoints come only from the standard AWS variables, which boto3 (>= 1.28) reads itself:
AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_SQS, or AWS_ENDPOINT_URL (e.g. LocalStack). Without
any of them the script refuses to run (it would talk to real AWS) unless --real-aws is given.
With an endpoint set and no credentials/region configured, it uses test/test and us-east-1.
AWS_REGION is honoured as well as AWS_DEFAULT_REGION (botocore itself reads only the latter).

Progress goes to stderr, one line per resource; stdout gets only machine-readable lines:
  TABLE=...  PURGE_QUEUE_URL=...  PURGE_DLQ_URL=...
"""

import argparse
import json
import os
import sys
import time

try:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError
    from botocore.exceptions import ConnectionError as BotoConnectionError
except ImportError:  # pragma: no cover
    sys.exit(
        "create-resources: error: boto3 is not installed "
        "(scripts/aws-deps installs it into .cache/venv; run .cache/venv/bin/python scripts/create-resources.py)"
    )

KEY_SCHEMA = [
    {"AttributeName": "pk", "KeyType": "HASH"},
    {"AttributeName": "sk", "KeyType": "RANGE"},
]
ATTRIBUTES = [
    {"AttributeName": "pk", "AttributeType": "S"},
    {"AttributeName": "sk", "AttributeType": "S"},
]
TTL_ATTRIBUTE = "ttl"
PURGE_VISIBILITY_TIMEOUT = "60"
PURGE_MAX_RECEIVE_COUNT = 5
DLQ_RETENTION_SECONDS = "1209600"  # 14 days, the SQS maximum
ENDPOINT_VARS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS")


def log(msg):
    print(f"create-resources: {msg}", file=sys.stderr, flush=True)


def fail(msg):
    log(f"error: {msg}")
    sys.exit(1)


def error_code(err):
    return err.response.get("Error", {}).get("Code", "")


def session(real_aws):
    endpoints = {v: os.environ[v] for v in ENDPOINT_VARS if os.environ.get(v)}
    if not endpoints and not real_aws:
        fail(
            "no AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_DYNAMODB or AWS_ENDPOINT_URL_SQS set: "
            "refusing to create resources in real AWS (pass --real-aws if that is what you want; "
            'for the emulators: eval "$(scripts/emulators env)")'
        )
    region = os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION")
    sess = boto3.session.Session(region_name=region)
    if sess.region_name is None:
        if not endpoints:
            fail("no region configured (set AWS_REGION or AWS_DEFAULT_REGION)")
        sess = boto3.session.Session(region_name="us-east-1")
    if sess.get_credentials() is None:
        if not endpoints:
            fail("no AWS credentials found")
        sess = boto3.session.Session(
            region_name=sess.region_name, aws_access_key_id="test", aws_secret_access_key="test"
        )
    return sess, endpoints


def wait_for(what, probe, timeout):
    """Call probe() until it stops raising a connection error, for up to timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return probe()
        except BotoConnectionError as err:
            if time.monotonic() >= deadline:
                fail(f"{what} did not answer within {timeout:.0f}s: {err}")
            time.sleep(0.5)


def ensure_table(ddb, name, timeout):
    try:
        desc = ddb.describe_table(TableName=name)["Table"]
        created = False
    except ClientError as err:
        if error_code(err) != "ResourceNotFoundException":
            raise
        try:
            desc = ddb.create_table(
                TableName=name,
                KeySchema=KEY_SCHEMA,
                AttributeDefinitions=ATTRIBUTES,
                BillingMode="PAY_PER_REQUEST",
            )["TableDescription"]
            created = True
        except ClientError as err2:
            if error_code(err2) != "ResourceInUseException":  # created concurrently: fine
                raise
            desc = ddb.describe_table(TableName=name)["Table"]
            created = False

    have = sorted((k["AttributeName"], k["KeyType"]) for k in desc["KeySchema"])
    want = sorted((k["AttributeName"], k["KeyType"]) for k in KEY_SCHEMA)
    if have != want:
        fail(f"table {name} exists with key schema {desc['KeySchema']}, expected {KEY_SCHEMA}; delete it first")

    deadline = time.monotonic() + timeout
    while desc.get("TableStatus") != "ACTIVE":
        if time.monotonic() >= deadline:
            fail(f"table {name} is still {desc.get('TableStatus')} after {timeout:.0f}s")
        time.sleep(1)
        desc = ddb.describe_table(TableName=name)["Table"]
    log(f"table {name}: {'created' if created else 'exists'} (pk S HASH, sk S RANGE, PAY_PER_REQUEST)")

    ttl = ddb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
    status, attr = ttl.get("TimeToLiveStatus"), ttl.get("AttributeName")
    if status in ("ENABLED", "ENABLING"):
        if attr != TTL_ATTRIBUTE:
            fail(f"table {name} has TTL on attribute {attr!r}, expected {TTL_ATTRIBUTE!r}")
        log(f"table {name}: TTL on {TTL_ATTRIBUTE} already {status.lower()}")
        return
    try:
        ddb.update_time_to_live(
            TableName=name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
        )
        log(f"table {name}: TTL on {TTL_ATTRIBUTE} enabled")
    except ClientError as err:
        # Tolerate "already enabled" (a concurrent run, or an emulator with a stale describe).
        if error_code(err) == "ValidationException" and "already enabled" in str(err).lower():
            log(f"table {name}: TTL on {TTL_ATTRIBUTE} already enabled")
        else:
            raise


def ensure_queue(sqs, name, attributes):
    """Create the queue, or converge an existing one's attributes. Returns (url, arn, what happened)."""
    try:
        url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        existed = True
    except ClientError as err:
        if error_code(err) not in ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"):
            raise
        url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        existed = False
    current = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    changed = {k: v for k, v in attributes.items() if not same_attribute(k, current.get(k), v)}
    if changed:
        sqs.set_queue_attributes(QueueUrl=url, Attributes=changed)
    state = "created" if not existed else ("updated " + ", ".join(sorted(changed)) if changed else "exists")
    return url, current["QueueArn"], state


def same_attribute(key, have, want):
    if have is None:
        return False
    if key == "RedrivePolicy":
        try:
            h, w = json.loads(have), json.loads(want)
        except ValueError:
            return False
        return h.get("deadLetterTargetArn") == w.get("deadLetterTargetArn") and int(
            h.get("maxReceiveCount", 0)
        ) == int(w.get("maxReceiveCount", 0))
    return str(have) == str(want)


def main():
    parser = argparse.ArgumentParser(
        description="Create the agentaddress DynamoDB table and SQS purge queues (idempotent).",
        epilog="Endpoints: AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_SQS or AWS_ENDPOINT_URL.",
    )
    parser.add_argument("--table", default="agentaddress", help="table name (default: %(default)s)")
    parser.add_argument(
        "--queue", default="agentaddress-purge", help="purge queue name; its DLQ is NAME-dlq (default: %(default)s)"
    )
    parser.add_argument(
        "--wait",
        action="store_true",
        help="wait (up to --timeout) for the endpoints to answer instead of failing at once",
    )
    parser.add_argument("--timeout", type=float, default=60, help="seconds for --wait and for the table to become ACTIVE")
    parser.add_argument("--real-aws", action="store_true", help="allow running without an endpoint override")
    args = parser.parse_args()

    sess, endpoints = session(args.real_aws)
    cfg = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=30)
    ddb = sess.client("dynamodb", config=cfg)
    sqs = sess.client("sqs", config=cfg)
    log(f"region {sess.region_name}; dynamodb at {ddb.meta.endpoint_url}; sqs at {sqs.meta.endpoint_url}")
    # boto3 < 1.28 ignores the endpoint variables and would quietly talk to real AWS.
    for client, var in ((ddb, "AWS_ENDPOINT_URL_DYNAMODB"), (sqs, "AWS_ENDPOINT_URL_SQS")):
        want = endpoints.get(var) or endpoints.get("AWS_ENDPOINT_URL")
        if want and client.meta.endpoint_url.rstrip("/") != want.rstrip("/"):
            fail(
                f"boto3 {boto3.__version__} resolved {client.meta.endpoint_url} although {var}/AWS_ENDPOINT_URL "
                f"say {want} (boto3 >= 1.28 is needed; AWS_IGNORE_CONFIGURED_ENDPOINT_URLS must be unset)"
            )

    wait_timeout = args.timeout if args.wait else 0
    wait_for(f"DynamoDB at {ddb.meta.endpoint_url}", ddb.list_tables, wait_timeout)
    wait_for(f"SQS at {sqs.meta.endpoint_url}", sqs.list_queues, wait_timeout)

    ensure_table(ddb, args.table, args.timeout)

    dlq_name = f"{args.queue}-dlq"
    dlq_url, dlq_arn, state = ensure_queue(sqs, dlq_name, {"MessageRetentionPeriod": DLQ_RETENTION_SECONDS})
    log(f"queue {dlq_name}: {state} ({dlq_url})")

    redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(PURGE_MAX_RECEIVE_COUNT)})
    url, _, state = ensure_queue(
        sqs, args.queue, {"VisibilityTimeout": PURGE_VISIBILITY_TIMEOUT, "RedrivePolicy": redrive}
    )
    log(
        f"queue {args.queue}: {state} ({url}; visibility {PURGE_VISIBILITY_TIMEOUT}s, "
        f"after {PURGE_MAX_RECEIVE_COUNT} receives -> {dlq_name})"
    )

    print(f"TABLE={args.table}")
    print(f"PURGE_QUEUE_URL={url}")
    print(f"PURGE_DLQ_URL={dlq_url}")


if __name__ == "__main__":
    try:
        main()
    except (ClientError, BotoCoreError) as err:
        fail(str(err))

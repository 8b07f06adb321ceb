#!/usr/bin/env python3
"""Create the AWS resources of the serverless stack, idempotently (what exists is kept).

THE one resource script: the local test stack (scripts/lambda-local) and a LocalStack init hook
both run it, so what LocalStack users get is what the tests use. Needs only boto3.

  table        NAME (default agentaddress): pk (S, HASH) + sk (S, RANGE), PAY_PER_REQUEST,
               TTL on attribute `ttl`
  dead-letter  QUEUE-dlq (messages kept 14 days)
  purge queue  QUEUE (default agentaddress-purge): VisibilityTimeout 60,
               RedrivePolicy maxReceiveCount 5 -> QUEUE-dlq
  email dlq    EMAIL_QUEUE-dlq (messages kept 14 days)
  email queue  EMAIL_QUEUE (default agentaddress-email): VisibilityTimeout 60 (or
               --email-visibility-timeout),
               RedrivePolicy maxReceiveCount 5 -> EMAIL_QUEUE-dlq, a policy letting the bucket's
               notifications in
  bucket       BUCKET (default agentaddress-email), path-style addressing: where SES stores
               inbound messages (inbound/{message id}) and the store keeps each address's
               (mail/{address_id}/{email_id}); its notification configuration sends
               s3:ObjectCreated:* under inbound/ to EMAIL_QUEUE (template.yaml's EmailBucket)

Endpoints come only from the standard AWS variables, which boto3 (>= 1.28) reads itself:
AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL_S3, or AWS_ENDPOINT_URL (e.g.
LocalStack). Without any of them the script refuses to run (it would talk to real AWS) unless
--real-aws is given; with some of them, each of the three services needs its own or
AWS_ENDPOINT_URL. With an endpoint set and no credentials/region configured, it uses test/test
and us-east-1. AWS_REGION is honoured as well as AWS_DEFAULT_REGION (botocore itself reads only
the latter).

Progress goes to stderr, one line per resource; stdout gets only machine-readable lines:
  TABLE=...  PURGE_QUEUE_URL=...  PURGE_DLQ_URL=...
  EMAIL_BUCKET=...  EMAIL_PREFIX=inbound/  EMAIL_QUEUE_URL=...  EMAIL_DLQ_URL=...
"""

import argparse
import json
import os
import re
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
EMAIL_VISIBILITY_TIMEOUT = "60"
EMAIL_MAX_RECEIVE_COUNT = 5
# The send queue (template.yaml's SendQueue): six attempts, and the receipts that only find the
# send not yet due, before the DLQ.
SEND_VISIBILITY_TIMEOUT = "60"
# The wake queue (template.yaml's WakeQueue): a message comes back after this when its handling
# failed; the wake function hides it until its address is due otherwise.
WAKE_VISIBILITY_TIMEOUT = "60"
WAKE_MAX_RECEIVE_COUNT = 30
SEND_MAX_RECEIVE_COUNT = 20
EMAIL_PREFIX = "inbound/"
# The Id of the bucket's queue configuration; other configurations of the bucket are kept.
EMAIL_NOTIFICATION_ID = "agentaddress-inbound"
EMAIL_EVENTS = ["s3:ObjectCreated:*"]
DLQ_RETENTION_SECONDS = "1209600"  # 14 days, the SQS maximum
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
SERVICE_ENDPOINT_VARS = {
    "dynamodb": "AWS_ENDPOINT_URL_DYNAMODB",
    "sqs": "AWS_ENDPOINT_URL_SQS",
    "s3": "AWS_ENDPOINT_URL_S3",
}
ENDPOINT_VARS = ("AWS_ENDPOINT_URL", *SERVICE_ENDPOINT_VARS.values())


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
            f"none of {', '.join(ENDPOINT_VARS)} is set: "
            "refusing to create resources in real AWS (pass --real-aws if that is what you want; "
            'for the emulators: eval "$(scripts/emulators env)")'
        )
    if endpoints and not real_aws and "AWS_ENDPOINT_URL" not in endpoints:
        missing = [v for v in SERVICE_ENDPOINT_VARS.values() if v not in endpoints]
        if missing:
            fail(
                f"{', '.join(sorted(endpoints))} set but not {', '.join(missing)} (nor AWS_ENDPOINT_URL): "
                "refusing to create those resources in real AWS (pass --real-aws if that is what you want; "
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
    if key == "Policy":
        try:
            return json.loads(have) == json.loads(want)
        except ValueError:
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


def email_queue_policy(queue_arn, bucket):
    """S3 may send the bucket's notifications to the queue (template.yaml's EmailQueuePolicy)."""
    partition = queue_arn.split(":")[1] if queue_arn.count(":") >= 5 else "aws"
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "S3NotifiesEmailQueue",
                    "Effect": "Allow",
                    "Principal": {"Service": "s3.amazonaws.com"},
                    "Action": "sqs:SendMessage",
                    "Resource": queue_arn,
                    "Condition": {"ArnLike": {"aws:SourceArn": f"arn:{partition}:s3:::{bucket}"}},
                }
            ],
        },
        separators=(",", ":"),
    )


def ensure_bucket(s3, name, region):
    """Create the bucket unless this account has it already. Returns what happened."""
    try:
        s3.head_bucket(Bucket=name)
        return "exists"
    except ClientError as err:
        if error_code(err) not in ("404", "NoSuchBucket", "NotFound"):
            raise
    kwargs = {"Bucket": name}
    if region != "us-east-1":
        kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
    try:
        s3.create_bucket(**kwargs)
    except ClientError as err:
        if error_code(err) != "BucketAlreadyOwnedByYou":  # created concurrently: fine
            raise
        return "exists"
    return "created"


def ensure_notification(s3, bucket, queue_arn):
    """Send s3:ObjectCreated:* under EMAIL_PREFIX to the queue, keeping the bucket's other
    notification configurations. Returns what happened (nothing is put when it is already so:
    each put makes S3 send another s3:TestEvent)."""
    current = s3.get_bucket_notification_configuration(Bucket=bucket)
    current.pop("ResponseMetadata", None)
    want = {
        "Id": EMAIL_NOTIFICATION_ID,
        "QueueArn": queue_arn,
        "Events": EMAIL_EVENTS,
        "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": EMAIL_PREFIX}]}},
    }
    queues = current.get("QueueConfigurations", [])
    ours = [q for q in queues if q.get("Id") == EMAIL_NOTIFICATION_ID]
    if len(ours) == 1 and same_notification(ours[0], want):
        return "exists"
    current["QueueConfigurations"] = [q for q in queues if q.get("Id") != EMAIL_NOTIFICATION_ID] + [want]
    s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration=current)
    return "updated" if ours else "created"


def same_notification(have, want):
    def rules(conf):
        return sorted(
            (r.get("Name", "").lower(), r.get("Value", ""))
            for r in conf.get("Filter", {}).get("Key", {}).get("FilterRules", [])
        )

    return (
        have.get("QueueArn") == want["QueueArn"]
        and sorted(have.get("Events", [])) == sorted(want["Events"])
        and rules(have) == rules(want)
    )


def main():
    parser = argparse.ArgumentParser(
        description="Create the agentaddress DynamoDB table, SQS purge queues, email bucket and email queues (idempotent).",
        epilog="Endpoints: AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL.",
    )
    parser.add_argument("--table", default="agentaddress", help="table name (default: %(default)s)")
    parser.add_argument(
        "--queue", default="agentaddress-purge", help="purge queue name; its DLQ is NAME-dlq (default: %(default)s)"
    )
    parser.add_argument(
        "--bucket",
        default="agentaddress-email",
        help="email bucket name (S3 naming rules; default: %(default)s)",
    )
    parser.add_argument(
        "--email-queue",
        default="agentaddress-email",
        help="email queue name, fed by the bucket's notifications; its DLQ is NAME-dlq (default: %(default)s)",
    )
    parser.add_argument(
        "--email-visibility-timeout",
        type=int,
        default=int(EMAIL_VISIBILITY_TIMEOUT),
        help="seconds a received email notification stays hidden before it comes back; a refused "
        "message reaches the DLQ after 5 of them (default: %(default)s; the test stack uses less)",
    )
    parser.add_argument(
        "--send-queue",
        default="",
        help="the outbound send queue's name (its DLQ is NAME-dlq); empty: none (default)",
    )
    parser.add_argument(
        "--wake-queue",
        default="",
        help="the wake hooks' queue's name (its DLQ is NAME-dlq); empty: none (default)",
    )
    parser.add_argument(
        "--ses-identity",
        default="",
        help="an SES identity (a domain) to verify, so that outbound email may be sent from it "
        "(the emulator verifies at once; on real AWS it needs DNS records); empty: none",
    )
    parser.add_argument(
        "--wait",
        action="store_true",
        help="wait (up to --timeout) for the endpoints to answer instead of failing at once",
    )
    parser.add_argument("--timeout", type=float, default=60, help="seconds for --wait and for the table to become ACTIVE")
    parser.add_argument("--real-aws", action="store_true", help="allow running without an endpoint override")
    args = parser.parse_args()
    if args.email_queue == args.queue:
        fail(f"--email-queue and --queue are both {args.queue!r}: the two queues must differ")
    if not BUCKET_NAME.fullmatch(args.bucket) or ".." in args.bucket:
        fail(
            f"--bucket {args.bucket!r} is not a valid S3 bucket name "
            "(3 to 63 lower-case letters, digits, '.' and '-', starting and ending with a letter or digit)"
        )

    sess, endpoints = session(args.real_aws)
    cfg = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=30)
    ddb = sess.client("dynamodb", config=cfg)
    sqs = sess.client("sqs", config=cfg)
    # Path-style (http://host:port/bucket/key): emulators answer on one host name.
    s3 = sess.client("s3", config=cfg.merge(Config(s3={"addressing_style": "path"})))
    log(
        f"region {sess.region_name}; dynamodb at {ddb.meta.endpoint_url}; sqs at {sqs.meta.endpoint_url}; "
        f"s3 at {s3.meta.endpoint_url}"
    )
    # boto3 < 1.28 ignores the endpoint variables and would quietly talk to real AWS.
    for client, var in ((ddb, "AWS_ENDPOINT_URL_DYNAMODB"), (sqs, "AWS_ENDPOINT_URL_SQS"), (s3, "AWS_ENDPOINT_URL_S3")):
        want = endpoints.get(var) or endpoints.get("AWS_ENDPOINT_URL")
        if want and client.meta.endpoint_url.rstrip("/") != want.rstrip("/"):
            fail(
                f"boto3 {boto3.__version__} resolved {client.meta.endpoint_url} although {var}/AWS_ENDPOINT_URL "
                f"say {want} (boto3 >= 1.28 is needed; AWS_IGNORE_CONFIGURED_ENDPOINT_URLS must be unset)"
            )

    wait_timeout = args.timeout if args.wait else 0
    wait_for(f"DynamoDB at {ddb.meta.endpoint_url}", ddb.list_tables, wait_timeout)
    wait_for(f"SQS at {sqs.meta.endpoint_url}", sqs.list_queues, wait_timeout)
    wait_for(f"S3 at {s3.meta.endpoint_url}", s3.list_buckets, wait_timeout)

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

    email_dlq_name = f"{args.email_queue}-dlq"
    email_dlq_url, email_dlq_arn, state = ensure_queue(
        sqs, email_dlq_name, {"MessageRetentionPeriod": DLQ_RETENTION_SECONDS}
    )
    log(f"queue {email_dlq_name}: {state} ({email_dlq_url})")

    redrive = json.dumps({"deadLetterTargetArn": email_dlq_arn, "maxReceiveCount": str(EMAIL_MAX_RECEIVE_COUNT)})
    email_url, email_arn, state = ensure_queue(
        sqs,
        args.email_queue,
        {"VisibilityTimeout": str(args.email_visibility_timeout), "RedrivePolicy": redrive},
    )
    # The policy names the queue's ARN, known once the queue exists.
    _, _, policy_state = ensure_queue(sqs, args.email_queue, {"Policy": email_queue_policy(email_arn, args.bucket)})
    policy_state = "kept" if policy_state == "exists" else "set"
    log(
        f"queue {args.email_queue}: {state}, policy {policy_state} ({email_url}; visibility "
        f"{args.email_visibility_timeout}s, after {EMAIL_MAX_RECEIVE_COUNT} receives -> {email_dlq_name})"
    )

    state = ensure_bucket(s3, args.bucket, sess.region_name)
    log(f"bucket {args.bucket}: {state}")
    state = ensure_notification(s3, args.bucket, email_arn)
    log(f"bucket {args.bucket}: notification {state} (s3:ObjectCreated:* under {EMAIL_PREFIX} -> {args.email_queue})")

    send_url = send_dlq_url = ""
    if args.send_queue:
        send_dlq_name = f"{args.send_queue}-dlq"
        send_dlq_url, send_dlq_arn, state = ensure_queue(
            sqs, send_dlq_name, {"MessageRetentionPeriod": DLQ_RETENTION_SECONDS}
        )
        log(f"queue {send_dlq_name}: {state} ({send_dlq_url})")
        redrive = json.dumps({"deadLetterTargetArn": send_dlq_arn, "maxReceiveCount": str(SEND_MAX_RECEIVE_COUNT)})
        send_url, _, state = ensure_queue(
            sqs, args.send_queue, {"VisibilityTimeout": SEND_VISIBILITY_TIMEOUT, "RedrivePolicy": redrive}
        )
        log(
            f"queue {args.send_queue}: {state} ({send_url}; visibility {SEND_VISIBILITY_TIMEOUT}s, "
            f"after {SEND_MAX_RECEIVE_COUNT} receives -> {send_dlq_name})"
        )
    wake_url = wake_dlq_url = ""
    if args.wake_queue:
        wake_dlq_name = f"{args.wake_queue}-dlq"
        wake_dlq_url, wake_dlq_arn, state = ensure_queue(
            sqs, wake_dlq_name, {"MessageRetentionPeriod": DLQ_RETENTION_SECONDS}
        )
        log(f"queue {wake_dlq_name}: {state} ({wake_dlq_url})")
        redrive = json.dumps({"deadLetterTargetArn": wake_dlq_arn, "maxReceiveCount": str(WAKE_MAX_RECEIVE_COUNT)})
        wake_url, _, state = ensure_queue(
            sqs, args.wake_queue, {"VisibilityTimeout": WAKE_VISIBILITY_TIMEOUT, "RedrivePolicy": redrive}
        )
        log(
            f"queue {args.wake_queue}: {state} ({wake_url}; visibility {WAKE_VISIBILITY_TIMEOUT}s, "
            f"after {WAKE_MAX_RECEIVE_COUNT} receives -> {wake_dlq_name})"
        )
    if args.ses_identity:
        ses = sess.client("ses", config=cfg)
        ses.verify_domain_identity(Domain=args.ses_identity)
        log(f"ses identity {args.ses_identity}: verification asked (the emulator verifies at once)")

    print(f"TABLE={args.table}")
    print(f"PURGE_QUEUE_URL={url}")
    print(f"PURGE_DLQ_URL={dlq_url}")
    print(f"EMAIL_BUCKET={args.bucket}")
    print(f"EMAIL_PREFIX={EMAIL_PREFIX}")
    print(f"EMAIL_QUEUE_URL={email_url}")
    print(f"EMAIL_DLQ_URL={email_dlq_url}")
    if send_url:
        print(f"SEND_QUEUE_URL={send_url}")
        print(f"SEND_DLQ_URL={send_dlq_url}")
    if wake_url:
        print(f"WAKE_QUEUE_URL={wake_url}")
        print(f"WAKE_DLQ_URL={wake_dlq_url}")


if __name__ == "__main__":
    try:
        main()
    except (ClientError, BotoCoreError) as err:
        fail(str(err))

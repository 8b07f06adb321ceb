#!/usr/bin/env python3
"""The local stand-in for Lambda's SQS event source mapping (ReportBatchItemFailures on).

Polls an SQS queue and hands each batch to a function served by `cargo lambda watch`
(scripts/lambda-local), as Lambda does on AWS (template.yaml, e.g. EmailFunction's SQS event):

  1. ReceiveMessage: up to --batch-size messages (WaitTimeSeconds 1, every attribute), by
     --pollers pollers at once (default 5: Lambda starts an SQS event source with five
     concurrent batches), so one slow batch does not hold back the rest;
  2. POST {--invoke-url}/2015-03-31/functions/{--function}/invocations with the event Lambda
     builds: {"Records": [{"messageId", "receiptHandle", "body", "attributes",
     "messageAttributes", "md5OfBody", "eventSource": "aws:sqs", "eventSourceARN", "awsRegion"}]};
  3. the answer, as Lambda reads it:
       HTTP 200 with {"batchItemFailures": [{"itemIdentifier": messageId}, ...]}
           -> every message not listed is deleted; the listed ones become visible again after
              the queue's visibility timeout (and the queue moves them to its DLQ after
              maxReceiveCount receives);
       HTTP 200 with null, {}, or an empty/null batchItemFailures -> the whole batch is deleted;
       an unhandled function error (HTTP status other than 200, X-Amz-Function-Error, or a body
       with errorType), a body that is not JSON, or an itemIdentifier that is empty or not of
       the batch, or a function that cannot be reached -> nothing is deleted.

One line per batch on stderr (`sqs-to-lambda: ...`). A transient error (SQS or the function
unreachable) is logged and retried after 1 s; it never ends the loop. SIGTERM / SIGINT end it at
once, exit status 0 (messages of an unfinished batch are left to redelivery, as when a Lambda
instance dies).

The SQS endpoint comes from AWS_ENDPOINT_URL_SQS or AWS_ENDPOINT_URL (boto3 >= 1.28 reads them);
without either the script refuses to run unless --real-aws is given. With an endpoint and no
credentials/region configured, it uses test/test and us-east-1. Needs only boto3.

Usage: .cache/venv/bin/python scripts/sqs-to-lambda.py --queue-url URL --function NAME
           --invoke-url http://127.0.0.1:9000 [--batch-size 10] [--pollers 5] [--invoke-timeout 120]
"""

import argparse
import base64
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request

try:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError
except ImportError:  # pragma: no cover
    sys.exit(
        "sqs-to-lambda: error: boto3 is not installed "
        "(scripts/aws-deps installs it into .cache/venv; run .cache/venv/bin/python scripts/sqs-to-lambda.py)"
    )

BACKOFF_SECONDS = 1
# Lambda's synchronous response limit: a larger answer is an error.
MAX_RESPONSE_BYTES = 6 * 1024 * 1024


class Stop(BaseException):
    """Raised by the signal handler: not an Exception, so no error handler swallows it."""


def log(msg):
    print(f"sqs-to-lambda: {msg}", file=sys.stderr, flush=True)


def on_signal(signum, _frame):
    raise Stop(signal.Signals(signum).name)


def sqs_client(real_aws):
    endpoint = os.environ.get("AWS_ENDPOINT_URL_SQS") or os.environ.get("AWS_ENDPOINT_URL")
    if not endpoint and not real_aws:
        sys.exit(
            "sqs-to-lambda: error: no AWS_ENDPOINT_URL_SQS or AWS_ENDPOINT_URL set: refusing to poll a "
            "queue in real AWS (pass --real-aws if that is what you want)"
        )
    region = os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION")
    sess = boto3.session.Session(region_name=region)
    if sess.region_name is None:
        sess = boto3.session.Session(region_name="us-east-1")
    if sess.get_credentials() is None and endpoint:
        sess = boto3.session.Session(
            region_name=sess.region_name, aws_access_key_id="test", aws_secret_access_key="test"
        )
    cfg = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=30)
    return sess.client("sqs", config=cfg)


def message_attributes(attrs):
    """SQS's MessageAttributes in the shape of Lambda's event (camelCase, binary as base64)."""
    out = {}
    for name, a in (attrs or {}).items():
        value = {
            "stringListValues": a.get("StringListValues", []),
            "binaryListValues": [base64.b64encode(b).decode() for b in a.get("BinaryListValues", [])],
            "dataType": a.get("DataType", "String"),
        }
        if "StringValue" in a:
            value["stringValue"] = a["StringValue"]
        if "BinaryValue" in a:
            value["binaryValue"] = base64.b64encode(a["BinaryValue"]).decode()
        out[name] = value
    return out


def record(msg, queue_arn, region):
    rec = {
        "messageId": msg["MessageId"],
        "receiptHandle": msg["ReceiptHandle"],
        "body": msg.get("Body", ""),
        "attributes": msg.get("Attributes", {}),
        "messageAttributes": message_attributes(msg.get("MessageAttributes")),
        "md5OfBody": msg.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }
    if msg.get("MD5OfMessageAttributes"):
        rec["md5OfMessageAttributes"] = msg["MD5OfMessageAttributes"]
    return rec


def invoke(url, event, timeout):
    """Returns (failed message ids, None), or (None, why the whole batch failed)."""
    req = urllib.request.Request(
        url, data=json.dumps(event).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, function_error = resp.status, resp.headers.get("X-Amz-Function-Error")
            body = resp.read(MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as err:
        detail = err.read(300).decode("utf-8", "replace").strip()
        return None, f"HTTP {err.code} {detail}".strip()
    except (urllib.error.URLError, OSError) as err:
        return None, f"function unreachable: {getattr(err, 'reason', err)}"
    if status != 200:
        return None, f"HTTP {status}"
    if len(body) > MAX_RESPONSE_BYTES:
        return None, f"response over {MAX_RESPONSE_BYTES} bytes"
    try:
        answer = json.loads(body) if body.strip() else None
    except ValueError:
        return None, "response is not JSON"
    if function_error or (isinstance(answer, dict) and "errorType" in answer):
        why = answer.get("errorMessage", "") if isinstance(answer, dict) else ""
        kind = answer.get("errorType", function_error) if isinstance(answer, dict) else function_error
        return None, f"function error {kind}: {str(why)[:200]}"
    failures = answer.get("batchItemFailures") if isinstance(answer, dict) else None
    if failures is None:
        return set(), None
    if not isinstance(failures, list):
        return None, "batchItemFailures is not a list"
    ids = {m["messageId"] for m in event["Records"]}
    failed = set()
    for item in failures:
        ident = item.get("itemIdentifier") if isinstance(item, dict) else None
        if not isinstance(ident, str) or ident not in ids:
            return None, f"bad batchItemFailures entry {json.dumps(item)[:200]}"
        failed.add(ident)
    return failed, None


def delete(sqs, queue_url, messages):
    """Deletes the messages; returns how many SQS refused to delete."""
    if not messages:
        return 0
    resp = sqs.delete_message_batch(
        QueueUrl=queue_url,
        Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)],
    )
    for f in resp.get("Failed", []):
        log(f"could not delete a message: {f.get('Code')} {f.get('Message', '')}")
    return len(resp.get("Failed", []))


def main():
    parser = argparse.ArgumentParser(
        description="Feed an SQS queue to a function under `cargo lambda watch`, as Lambda's SQS event source does."
    )
    parser.add_argument("--queue-url", required=True, help="the queue to poll")
    parser.add_argument("--function", required=True, help="the function's name (its binary), e.g. email")
    parser.add_argument("--invoke-url", required=True, help="cargo lambda watch's base URL, e.g. http://127.0.0.1:9000")
    parser.add_argument("--batch-size", type=int, default=10, choices=range(1, 11), metavar="1..10",
                        help="most messages per invocation (default: %(default)s)")
    parser.add_argument("--invoke-timeout", type=float, default=120,
                        help="seconds to wait for the function's answer (default: %(default)s)")
    parser.add_argument("--pollers", type=int, default=5, choices=range(1, 101), metavar="1..100",
                        help="batches received and invoked at once, as Lambda's event source mapping starts "
                        "with five (default: %(default)s)")
    parser.add_argument("--real-aws", action="store_true", help="allow polling without an endpoint override")
    args = parser.parse_args()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    url = f"{args.invoke_url.rstrip('/')}/2015-03-31/functions/{args.function}/invocations"
    # One client per poller: boto3 sessions are not shared across threads.
    clients = [sqs_client(args.real_aws) for _ in range(args.pollers)]
    log(
        f"polling {args.queue_url} (sqs at {clients[0].meta.endpoint_url}) -> {url} "
        f"with {args.pollers} concurrent poller(s)"
    )
    for n, sqs in enumerate(clients):
        threading.Thread(target=poll, args=(sqs, args, url), name=f"poller-{n}", daemon=True).start()
    try:
        while True:
            time.sleep(3600)
    except Stop as sig:
        # The pollers are daemon threads: they end with the process, their batches unfinished.
        log(f"{sig}: stopping")


def poll(sqs, args, url):
    """One poller: receive a batch, invoke the function with it, delete what it handled; forever."""
    queue_arn = region = None
    while True:
        try:
            if queue_arn is None:
                attrs = sqs.get_queue_attributes(QueueUrl=args.queue_url, AttributeNames=["QueueArn"])
                queue_arn = attrs["Attributes"]["QueueArn"]
                region = queue_arn.split(":")[3] if queue_arn.count(":") >= 5 else sqs.meta.region_name
            messages = sqs.receive_message(
                QueueUrl=args.queue_url,
                MaxNumberOfMessages=args.batch_size,
                WaitTimeSeconds=1,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            if not messages:
                continue
            event = {"Records": [record(m, queue_arn, region) for m in messages]}
            started = time.monotonic()
            failed, why = invoke(url, event, args.invoke_timeout)
            took = f"{time.monotonic() - started:.2f} s"
            if failed is None:
                log(f"{len(messages)} message(s) -> {args.function} ({took}): {why}; none deleted (redelivered later)")
                time.sleep(BACKOFF_SECONDS)
                continue
            done = [m for m in messages if m["MessageId"] not in failed]
            refused = delete(sqs, args.queue_url, done)
            log(
                f"{len(messages)} message(s) -> {args.function} ({took}): {len(done) - refused} deleted"
                + (f", {len(failed)} failed (redelivered later)" if failed else "")
                + (f", {refused} not deleted" if refused else "")
            )
        except (BotoCoreError, ClientError) as err:
            log(f"SQS error: {err}; retrying in {BACKOFF_SECONDS} s")
            time.sleep(BACKOFF_SECONDS)
        except Exception as err:  # noqa: BLE001 -- a stand-in for a service: log, never exit
            log(f"error: {err!r}; retrying in {BACKOFF_SECONDS} s")
            time.sleep(BACKOFF_SECONDS)


if __name__ == "__main__":
    main()

#!/bin/sh
# LocalStack init hook: creates agentaddress's table, purge queues, email bucket and email queues
# with the project's one resource script. LocalStack runs it when it is ready; scripts/test runs
# it against the SQS/DynamoDB emulator with LOCALSTACK_ENDPOINT and AGENTADDRESS_RESOURCE_SCRIPT
# overridden.
set -eu
export AWS_ENDPOINT_URL="${LOCALSTACK_ENDPOINT:-http://localhost:4566}"
export AWS_REGION="${AWS_DEFAULT_REGION:-us-east-1}"
export AWS_DEFAULT_REGION="$AWS_REGION"
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}"
export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"
unset AWS_ENDPOINT_URL_DYNAMODB AWS_ENDPOINT_URL_SQS AWS_ENDPOINT_URL_S3
exec "${PYTHON:-python3}" "${AGENTADDRESS_RESOURCE_SCRIPT:-/opt/agentaddress/create-resources.py}" \
  --table "${AGENTADDRESS_TABLE:-agentaddress}" \
  --queue "${AGENTADDRESS_PURGE_QUEUE:-agentaddress-purge}" \
  --bucket "${AGENTADDRESS_EMAIL_BUCKET:-agentaddress-email}" \
  --email-queue "${AGENTADDRESS_EMAIL_QUEUE:-agentaddress-email}" \
  --wait

//! AWS Lambda entry points for agentaddress: one binary per route group over the shared router
//! and the DynamoDB store. The binaries arrive with the DynamoDB store (see the project issues);
//! until then the embedded server (`agentaddress serve`) serves the whole contract.
#![forbid(unsafe_code)]

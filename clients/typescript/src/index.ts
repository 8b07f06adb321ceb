export { Client, Address, State } from "./client.js";
export type { ClientOptions, Event, Page, PollOptions, EventsOptions, HookView, PersonRequest, Timer, Delivery, JsonValue } from "./client.js";
export type { CreateAddressOptions, HookOptions, AskOptions, TimerOptions } from "./contract.js";
export { AgentAddressError, RevisionConflict, Unauthorized, AddressGone, RateLimited, InvalidSignature } from "./errors.js";
export { verifyWake } from "./wake.js";
export type { Wake, HeadersLike, VerifyWakeOptions } from "./wake.js";
export { credentialsDirectory, type CredentialsFile } from "./credentials.js";

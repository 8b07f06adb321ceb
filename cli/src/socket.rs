//! `GET /api/v1/ws` on `agentaddress serve`: the wake-up socket of docs/API.md §17. A client
//! subscribes to addresses with their read tokens; the server sends `notify` whenever an
//! address's feed grows past what the client was told, woken by the same per-address signal as
//! long polls. The socket only wakes: the feed (`GET events`) stays the one source of events.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentaddress_api::socket::{self as protocol, ClientFrame};
use agentaddress_api::AppState;
use agentaddress_core::store::TypeFilter;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::watch;
use tokio_stream::wrappers::WatchStream;
use tokio_stream::StreamMap;

pub use protocol::{MAX_FRAME_BYTES, MAX_SOCKETS_PER_ADDRESS, MAX_SUBSCRIPTIONS};
/// How often a socket checks that its addresses still live: an expiry is learnt this late at
/// most (a deletion wakes it at once).
const LIVENESS_CHECK: Duration = Duration::from_secs(30);
/// How often the server pings a socket (docs/API.md §17); one that sends nothing back (no
/// pong, no frame at all) until the next ping is closed with 1001.
pub const PING_INTERVAL: Duration = Duration::from_secs(30);

/// Sockets per address, for [`MAX_SOCKETS_PER_ADDRESS`].
#[derive(Default)]
pub struct SocketCounts(Mutex<HashMap<String, usize>>);

impl SocketCounts {
    fn take(&self, address_id: &str) -> bool {
        let mut m = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = m.entry(address_id.to_owned()).or_insert(0);
        if *n >= MAX_SOCKETS_PER_ADDRESS {
            return false;
        }
        *n += 1;
        true
    }

    fn give_back(&self, address_id: &str) {
        let mut m = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = m.get_mut(address_id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(address_id);
            }
        }
    }
}

/// What the route needs besides the API's state.
#[derive(Clone)]
pub struct Sockets {
    pub state: AppState,
    pub counts: Arc<SocketCounts>,
    /// [`PING_INTERVAL`], but for tests.
    pub ping_every: Duration,
}

pub async fn upgrade(State(sockets): State<Sockets>, ws: WebSocketUpgrade) -> Response {
    // Small buffers: a socket mostly waits, and its frames are small (tungstenite's defaults,
    // 128 KiB each way, made 10,000 idle sockets hold 1.4 GB; docs/PERFORMANCE.md).
    ws.max_message_size(MAX_FRAME_BYTES)
        .max_frame_size(MAX_FRAME_BYTES)
        .read_buffer_size(4 * 1024)
        .write_buffer_size(0)
        .max_write_buffer_size(256 * 1024)
        .on_upgrade(move |socket| run(socket, sockets))
}

/// One subscription: the last sequence the client was told.
struct Subscription {
    told: u64,
    /// Only appends of these types notify (docs/API.md §21).
    filter: Option<TypeFilter>,
}

async fn run(mut socket: WebSocket, sockets: Sockets) {
    let state = &sockets.state;
    let Some(signal) = state.store.feed_signal() else {
        let _ = socket
            .send(text(&protocol::error(
                "not_supported",
                "No wake-up signal here.",
            )))
            .await;
        return;
    };
    let mut subs: HashMap<String, Subscription> = HashMap::new();
    let mut wakeups: StreamMap<String, WatchStream<u64>> = StreamMap::new();
    let mut shutdown = state.shutdown.clone();
    let mut liveness = tokio::time::interval(LIVENESS_CHECK);
    liveness.tick().await;
    let mut ping = tokio::time::interval(sockets.ping_every);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await;
    // Whether the client sent anything since the last ping.
    let mut heard = true;
    loop {
        tokio::select! {
            frame = socket.recv() => {
                let frame = match frame {
                    Some(Ok(frame)) => frame,
                    Some(Err(e)) => {
                        refuse(&mut socket, e).await;
                        break;
                    }
                    None => break,
                };
                heard = true;
                let reply = match frame {
                    Message::Text(t) => {
                        handle(t.as_str(), state, signal, &sockets.counts, &mut subs, &mut wakeups).await
                    }
                    Message::Binary(_) => Some(protocol::binary_refused()),
                    Message::Ping(_) | Message::Pong(_) => None,
                    Message::Close(_) => break,
                };
                if let Some(reply) = reply {
                    if socket.send(text(&reply)).await.is_err() {
                        break;
                    }
                }
            }
            Some((address_id, _)) = wakeups.next(), if !wakeups.is_empty() => {
                if !tell(&mut socket, state, &address_id, &mut subs, &mut wakeups, &sockets.counts).await {
                    break;
                }
            }
            _ = ping.tick() => {
                if !heard {
                    tracing::debug!("closing a wake-up socket: no answer to the last ping");
                    let _ = socket.send(close(1001, "no answer to ping")).await;
                    break;
                }
                heard = false;
                if socket.send(Message::Ping(Default::default())).await.is_err() {
                    break;
                }
            }
            _ = liveness.tick() => {
                let ids: Vec<String> = subs.keys().cloned().collect();
                let mut closed = false;
                for id in ids {
                    if !tell(&mut socket, state, &id, &mut subs, &mut wakeups, &sockets.counts).await {
                        closed = true;
                        break;
                    }
                }
                if closed {
                    break;
                }
            }
            _ = shutdown.changed() => {
                let _ = socket.send(close(1001, "the server is shutting down")).await;
                break;
            }
        }
    }
    for id in subs.keys() {
        sockets.counts.give_back(id);
    }
}

/// Sends `notify` when `address_id`'s feed grew past what the client was told, or `gone`
/// (and drops the subscription) when the address no longer lives. `false`: the socket is
/// closed.
async fn tell(
    socket: &mut WebSocket, state: &AppState, address_id: &str,
    subs: &mut HashMap<String, Subscription>, wakeups: &mut StreamMap<String, WatchStream<u64>>,
    counts: &SocketCounts,
) -> bool {
    let Some(sub) = subs.get_mut(address_id) else {
        return true;
    };
    let now = state.clock.now();
    let live = match state.store.get_address(address_id, now).await {
        Ok(Some(a)) if !a.is_gone(now) => Some(a.last_sequence),
        Ok(_) | Err(agentaddress_core::store::StoreError::AddressGone) => None,
        Err(e) => {
            tracing::warn!(error = %e, "a socket could not read an address");
            return true;
        }
    };
    let frame = match live {
        Some(last) if last > sub.told => {
            let told = sub.told;
            sub.told = last;
            if let Some(filter) = &sub.filter {
                match matched_since(state, address_id, told, last, filter, now).await {
                    Ok(true) => {}
                    Ok(false) => return true,
                    Err(e) => {
                        // Told again at the next look (its liveness tick at the latest).
                        tracing::warn!(error = %e, "a socket could not read a feed");
                        sub.told = told;
                        return true;
                    }
                }
            }
            protocol::notify(address_id, last)
        }
        Some(_) => return true,
        None => {
            subs.remove(address_id);
            wakeups.remove(address_id);
            counts.give_back(address_id);
            protocol::gone(address_id)
        }
    };
    socket.send(text(&frame)).await.is_ok()
}

/// Whether an event that `filter` matches was appended to `address_id`'s feed after `told`,
/// up to `last`: filtered reads of at most 1,000 events each, without their data beyond the
/// first match.
async fn matched_since(
    state: &AppState, address_id: &str, told: u64, last: u64, filter: &TypeFilter, now: i64,
) -> Result<bool, agentaddress_core::store::StoreError> {
    let mut after = told;
    while after < last {
        let page = state
            .store
            .read_matching(address_id, after, filter, 1, 1, now)
            .await?;
        if !page.page.events.is_empty() {
            return Ok(true);
        }
        if !page.page.has_more || page.examined_through <= after {
            return Ok(false);
        }
        after = page.examined_through;
    }
    Ok(false)
}

/// Answers one client frame.
async fn handle(
    frame: &str, state: &AppState, signal: &agentaddress_core::store::FeedSignal,
    counts: &SocketCounts, subs: &mut HashMap<String, Subscription>,
    wakeups: &mut StreamMap<String, WatchStream<u64>>,
) -> Option<Value> {
    let frame = match protocol::parse(frame) {
        Ok(frame) => frame,
        Err(refusal) => return Some(refusal),
    };
    match frame {
        ClientFrame::Ping => Some(protocol::pong()),
        ClientFrame::Unsubscribe { address_id: id } => {
            if subs.remove(&id).is_some() {
                wakeups.remove(&id);
                counts.give_back(&id);
            }
            Some(protocol::unsubscribed(&id))
        }
        ClientFrame::Subscribe {
            address_id: id,
            read_token,
            types,
        } => {
            let now = state.clock.now();
            let record = match protocol::authorize(state, &id, &read_token, now).await {
                Ok(record) => record,
                Err(refusal) => return Some(refusal),
            };
            if subs.contains_key(&id) {
                return Some(protocol::subscribed(&id, record.last_sequence));
            }
            if subs.len() >= MAX_SUBSCRIPTIONS {
                return Some(protocol::socket_full());
            }
            if !counts.take(&id) {
                return Some(protocol::address_full());
            }
            // Subscribed before the sequence is read: no append between them is missed.
            let rx: watch::Receiver<u64> = signal.subscribe(&id);
            let last = match state.store.last_sequence(&id, now).await {
                Ok(last) => last,
                Err(_) => record.last_sequence,
            };
            wakeups.insert(id.clone(), WatchStream::from_changes(rx));
            subs.insert(
                id.clone(),
                Subscription {
                    told: last,
                    filter: types.map(TypeFilter::new),
                },
            );
            // A client whose cursor (`after`) is behind `last_sequence` reads the feed now.
            Some(protocol::subscribed(&id, last))
        }
    }
}

fn close(code: u16, reason: &'static str) -> Message {
    Message::Close(Some(axum::extract::ws::CloseFrame {
        code,
        reason: reason.into(),
    }))
}

/// After a frame the socket could not read: the close code that says why (docs/API.md §17),
/// when the connection can still carry one — 1009 for a frame or message over 16 KiB, 1007
/// for text that is not UTF-8, 1002 for a broken frame.
async fn refuse(socket: &mut WebSocket, error: axum::Error) {
    use tokio_tungstenite::tungstenite::error::{CapacityError, Error};
    let (code, reason) = match error.into_inner().downcast::<Error>().map(|e| *e) {
        Ok(Error::Capacity(CapacityError::MessageTooLong { .. })) => {
            (1009, "message too big: a frame is at most 16 KiB")
        }
        Ok(Error::Capacity(_)) => (1009, "message too big"),
        Ok(Error::Utf8(_)) => (1007, "text frames are UTF-8"),
        Ok(Error::Protocol(_)) => (1002, "protocol error"),
        // The connection itself failed: nothing can be said on it.
        _ => return,
    };
    tracing::debug!(
        code,
        reason,
        "closing a wake-up socket on a frame it could not read"
    );
    let _ = socket.send(close(code, reason)).await;
}

fn text(v: &Value) -> Message {
    Message::Text(v.to_string().into())
}

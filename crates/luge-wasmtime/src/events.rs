//! Components woken by events: the exports Spin's triggers call, bound to
//! [`luge_core::event`]. A Redis subscriber exports
//! `spin:redis/inbound-redis@3.0.0` (spin-sdk 7's `#[redis_subscriber]`, a
//! WASI 0.3 `async func`), or Spin 2's unversioned
//! `fermyon:spin/inbound-redis` (spin-sdk 2 and 3); a cron component exports `handle-cron-event`
//! of `fermyon:spin-cron@2.0.0` (spin-trigger-cron's
//! `#[cron_component]`); an MQTT component exports `handle-message` of
//! `spin:mqtt-trigger@3.0.0` (spin-trigger-mqtt's `#[mqtt_component]`, an
//! `async func`); a wasmCloud messaging component exports
//! `wasmcloud:messaging/handler@0.2.0`'s `handle-message` (a broker
//! message: its subject and body); a queue component of spin-trigger-sqs
//! exports `handle-queue-message` of `spin:sqs@3.0.0` (an `async func`),
//! given a durable queue's message as SQS would give it (its id, its
//! `SentTimestamp`, its text) and deleting it or leaving it to be
//! delivered again. Each runs as every component does: a fresh
//! instance per event from the pre-instantiated component, under the
//! invocation's limits, schedule and grants ([`crate::component`]); an
//! `async func` export is called inside the store's event loop
//! (`run_concurrent`), where a 0.3 guest's tasks progress, the others
//! directly. The handler's `error` result ends the sandbox
//! as exit status 1 with the error on its stderr. The WIT is Luge's root,
//! wit/ (worlds `redis-trigger`, `mqtt-trigger`, `cron-trigger`,
//! `messaging-handler` and `sqs-trigger`).

use std::sync::Arc;

use luge_core::event::{Event, EventExport, EventKind};
use luge_core::{Invocation, LoadedModule, Outcome, Preemption, SandboxFuture};
use wasmtime::component::InstancePre;
use wasmtime::{Engine, Store};

use crate::component::{ComponentState, Shared};

/// The bindings of one event world of Luge's WIT root. An export that is
/// an `async func` is called with the store's accessor
/// (`async | store`), inside its event loop; one that is not, as a plain
/// `async` call, which needs no event loop and so also runs on the engine
/// without concurrency support (see [`crate::ComponentAbi`]).
macro_rules! event_world {
    ($module:ident, $world:literal, $($exports:tt)+) => {
        mod $module {
            wasmtime::component::bindgen!({
                path: "../../wit",
                world: $world,
                exports: { default: $($exports)+ },
            });
        }
    };
}

event_world!(redis, "luge:worlds/redis-trigger", async | store);
event_world!(redis2, "luge:worlds/redis-trigger-spin2", async);
event_world!(mqtt, "luge:worlds/mqtt-trigger", async | store);
event_world!(cron, "luge:worlds/cron-trigger", async);
event_world!(messaging, "luge:worlds/messaging-handler", async);
event_world!(sqs, "luge:worlds/sqs-trigger", async | store);

/// What a component of none of these worlds says when asked to take an
/// event.
const NOT_AN_EVENT_HANDLER: &str = "the function exports no handler for this kind of event (spin:redis/inbound-redis, spin:mqtt-trigger, fermyon:spin-cron, wasmcloud:messaging/handler or spin:sqs)";

/// The pre-instance of a component as the world of the export it has.
enum Pre {
    Redis(redis::RedisTriggerPre<ComponentState>),
    Redis2(redis2::RedisTriggerSpin2Pre<ComponentState>),
    Mqtt(mqtt::MqttTriggerPre<ComponentState>),
    Cron(cron::CronTriggerPre<ComponentState>),
    Messaging(messaging::MessagingHandlerPre<ComponentState>),
    Sqs(sqs::SqsTriggerPre<ComponentState>),
}

/// A loaded component that exports a handler for events.
pub struct EventComponent {
    pre: Pre,
    shared: Shared,
}

/// Loads a prepared component as an event handler if it exports one;
/// otherwise gives the pre-instance back.
#[allow(clippy::result_large_err)]
pub(crate) fn load(
    pre: InstancePre<ComponentState>,
    shared: Shared,
) -> Result<Arc<dyn LoadedModule>, (InstancePre<ComponentState>, Shared)> {
    // The first world whose export the component has.
    macro_rules! first_of {
        ($($variant:ident: $world:ty),+) => {
            $(if let Ok(pre) = <$world>::new(pre.clone()) {
                return Ok(Arc::new(EventComponent {
                    pre: Pre::$variant(pre),
                    shared,
                }));
            })+
        };
    }
    first_of!(
        Redis: redis::RedisTriggerPre<ComponentState>,
        Redis2: redis2::RedisTriggerSpin2Pre<ComponentState>,
        Mqtt: mqtt::MqttTriggerPre<ComponentState>,
        Cron: cron::CronTriggerPre<ComponentState>,
        Messaging: messaging::MessagingHandlerPre<ComponentState>,
        Sqs: sqs::SqsTriggerPre<ComponentState>
    );
    Err((pre, shared))
}

impl EventComponent {
    fn engine(&self) -> &Engine {
        match &self.pre {
            Pre::Redis(pre) => pre.engine(),
            Pre::Redis2(pre) => pre.engine(),
            Pre::Mqtt(pre) => pre.engine(),
            Pre::Cron(pre) => pre.engine(),
            Pre::Messaging(pre) => pre.engine(),
            Pre::Sqs(pre) => pre.engine(),
        }
    }

    async fn handle(
        &self,
        invocation: Invocation,
        event: Event,
        preemption: Preemption,
    ) -> Outcome {
        // The handler's own error, told on its stderr.
        let mut refused: Option<String> = None;
        let body = async |store: &mut Store<ComponentState>| -> wasmtime::Result<()> {
            let answer = match (&self.pre, event.kind) {
                (Pre::Redis(pre), EventKind::Redis { .. }) => {
                    let guest = pre.instantiate_async(&mut *store).await?;
                    crate::component::instantiated(store);
                    let payload = event.payload;
                    store
                        .run_concurrent(async move |store| {
                            guest
                                .spin_redis_inbound_redis()
                                .call_handle_message(store, payload)
                                .await
                        })
                        .await??
                        .map_err(|e| format!("{e:?}"))
                }
                (Pre::Redis2(pre), EventKind::Redis { .. }) => {
                    let guest = pre.instantiate_async(&mut *store).await?;
                    crate::component::instantiated(store);
                    guest
                        .fermyon_spin_inbound_redis()
                        .call_handle_message(&mut *store, &event.payload)
                        .await?
                        .map_err(|e| format!("{e:?}"))
                }
                (Pre::Mqtt(pre), EventKind::Mqtt { topic }) => {
                    let guest = pre.instantiate_async(&mut *store).await?;
                    crate::component::instantiated(store);
                    let payload = event.payload;
                    let metadata = mqtt::spin::mqtt_trigger::spin_mqtt_types::Metadata { topic };
                    store
                        .run_concurrent(async move |store| {
                            guest.call_handle_message(store, payload, metadata).await
                        })
                        .await??
                        .map_err(|e| format!("{e:?}"))
                }
                (Pre::Cron(pre), EventKind::Cron { timestamp }) => {
                    let guest = pre.instantiate_async(&mut *store).await?;
                    crate::component::instantiated(store);
                    let metadata = cron::fermyon::spin_cron::cron_types::Metadata { timestamp };
                    guest
                        .call_handle_cron_event(&mut *store, metadata)
                        .await?
                        .map_err(|e| format!("{e:?}"))
                }
                (Pre::Messaging(pre), EventKind::Message { subject, .. }) => {
                    let guest = pre.instantiate_async(&mut *store).await?;
                    crate::component::instantiated(store);
                    let message = messaging::wasmcloud::messaging::types::BrokerMessage {
                        subject,
                        body: event.payload,
                        reply_to: None,
                    };
                    guest
                        .wasmcloud_messaging_handler()
                        .call_handle_message(&mut *store, &message)
                        .await?
                }
                (Pre::Sqs(pre), EventKind::Message { system, subject }) => {
                    let message = sqs_message(
                        &invocation.env,
                        system,
                        subject,
                        event.payload,
                        event.stored,
                    );
                    match message {
                        Err(refusal) => Err(refusal),
                        Ok(message) => {
                            let guest = pre.instantiate_async(&mut *store).await?;
                            crate::component::instantiated(store);
                            store
                                .run_concurrent(async move |store| {
                                    guest.call_handle_queue_message(store, message).await
                                })
                                .await??
                                .map_err(|e| format!("{e:?}"))
                                .and_then(sqs_action)
                        }
                    }
                }
                _ => return Err(wasmtime::Error::msg(NOT_AN_EVENT_HANDLER)),
            };
            answer.map_err(|message| {
                refused = Some(message);
                wasmtime::Error::new(wasmtime_wasi::I32Exit(1))
            })
        };
        let mut outcome = self
            .shared
            .invoke(self.engine(), &invocation, Some(preemption), body)
            .await;
        if let Some(message) = refused {
            let line = format!("the handler returned an error: {message}\n");
            outcome.stderr.extend_from_slice(line.as_bytes());
        }
        outcome
    }
}

impl LoadedModule for EventComponent {
    fn has_export(&self, _name: &str) -> bool {
        // Its entry is the world's, not a name.
        false
    }

    fn run(&self, _invocation: Invocation) -> Outcome {
        Outcome::failed(NOT_AN_EVENT_HANDLER)
    }

    fn code_size(&self) -> usize {
        self.shared.code_size
    }

    fn event_export(&self) -> Option<EventExport> {
        let (trigger, name) = match self.pre {
            // spin-sdk 7's `#[redis_subscriber]`.
            Pre::Redis(_) => ("redis", "spin:redis/inbound-redis@3.0.0#handle-message"),
            // spin-sdk 2 and 3's `#[redis_component]`.
            Pre::Redis2(_) => ("redis", "fermyon:spin/inbound-redis#handle-message"),
            // spin-trigger-mqtt's `#[mqtt_component]`.
            Pre::Mqtt(_) => ("mqtt", "spin:mqtt-trigger@3.0.0 handle-message"),
            // spin-trigger-cron's `#[cron_component]`.
            Pre::Cron(_) => ("cron", "fermyon:spin-cron@2.0.0 handle-cron-event"),
            // A wasmCloud messaging component.
            Pre::Messaging(_) => (
                "messaging",
                "wasmcloud:messaging/handler@0.2.0#handle-message",
            ),
            // spin-trigger-sqs's queue component.
            Pre::Sqs(_) => ("messaging", "spin:sqs@3.0.0 handle-queue-message"),
        };
        Some(EventExport { trigger, name })
    }

    fn start_event(
        self: Arc<Self>,
        invocation: Invocation,
        event: Event,
        preemption: Preemption,
    ) -> SandboxFuture {
        let export = self.event_export();
        if !export.is_some_and(|export| export.takes(&event.kind)) {
            return Box::pin(std::future::ready(Outcome::failed(NOT_AN_EVENT_HANDLER)));
        }
        Box::pin(async move { self.handle(invocation, event, preemption).await })
    }
}

/// A durable queue's message as spin-trigger-sqs hands one over: its id
/// (the trigger's event id), its attributes (`SentTimestamp`, SQS's own
/// name, in milliseconds since the epoch, when the broker stamped it;
/// the `subject` and the messaging `system`), and its text. A body that
/// is not UTF-8 cannot be `spin:sqs`'s, and fails the message.
fn sqs_message(
    env: &[(String, String)],
    system: &str,
    subject: String,
    payload: Vec<u8>,
    stored: Option<std::time::SystemTime>,
) -> Result<sqs::spin::sqs::sqs_types::Message, String> {
    use sqs::spin::sqs::sqs_types::{MessageAttribute, MessageAttributeValue};
    let body = String::from_utf8(payload)
        .map_err(|_| "the message is not UTF-8 text, which spin:sqs's body must be".to_owned())?;
    let text = |name: &str, value: String| MessageAttribute {
        name: name.to_owned(),
        data_type: Some("String".to_owned()),
        value: MessageAttributeValue::Str(value),
    };
    let mut attributes = vec![text("subject", subject), text("system", system.to_owned())];
    if let Some(sent) = stored.and_then(|stored| stored.duration_since(std::time::UNIX_EPOCH).ok())
    {
        attributes.push(text("SentTimestamp", sent.as_millis().to_string()));
    }
    let id = env
        .iter()
        .find(|(name, _)| name == "LUGE_EVENT_ID")
        .map(|(_, id)| id.clone());
    Ok(sqs::spin::sqs::sqs_types::Message {
        id,
        message_attributes: attributes,
        body: Some(body),
    })
}

/// What a queue component's `message-action` makes of its message:
/// deleted, it succeeded; left, it failed without an error of its own. SQS
/// makes a message left visible again; here the trigger retries it, and
/// dead-letters it after `max_attempts`, as SQS's redrive policy would.
fn sqs_action(action: sqs::spin::sqs::sqs_types::MessageAction) -> Result<(), String> {
    match action {
        sqs::spin::sqs::sqs_types::MessageAction::Delete => Ok(()),
        sqs::spin::sqs::sqs_types::MessageAction::Leave => {
            Err("the handler left the message on the queue: it is delivered again".to_owned())
        }
    }
}

//! What the store's requests cost: requests sent and capacity units consumed, as DynamoDB
//! reports them (`ReturnConsumedCapacity=TOTAL`), for docs/COSTS.md's measurements.

use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_dynamodb::types::ConsumedCapacity;

/// Requests sent and capacity units consumed (as DynamoDB reports them with
/// `ReturnConsumedCapacity=TOTAL`), for cost measurements.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: AtomicU64,
    read_milli_units: AtomicU64,
    write_milli_units: AtomicU64,
}

/// Outputs that report consumed capacity.
trait Consumed {
    const WRITE: bool;
    fn consumed(&self) -> Vec<&ConsumedCapacity>;
}

macro_rules! consumed_one {
    ($w:expr; $($t:ty),*) => {$(
        impl Consumed for $t {
            const WRITE: bool = $w;
            fn consumed(&self) -> Vec<&ConsumedCapacity> {
                self.consumed_capacity().into_iter().collect()
            }
        }
    )*};
}

macro_rules! consumed_many {
    ($($t:ty),*) => {$(
        impl Consumed for $t {
            const WRITE: bool = true;
            fn consumed(&self) -> Vec<&ConsumedCapacity> {
                self.consumed_capacity().iter().collect()
            }
        }
    )*};
}

consumed_one!(false;
    aws_sdk_dynamodb::operation::get_item::GetItemOutput,
    aws_sdk_dynamodb::operation::query::QueryOutput
);
consumed_one!(true;
    aws_sdk_dynamodb::operation::put_item::PutItemOutput,
    aws_sdk_dynamodb::operation::update_item::UpdateItemOutput,
    aws_sdk_dynamodb::operation::delete_item::DeleteItemOutput
);
consumed_many!(
    aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput,
    aws_sdk_dynamodb::operation::batch_write_item::BatchWriteItemOutput
);

/// Counts a request and the capacity it consumed.
pub(crate) trait Tally: Sized {
    fn tally(self, metrics: &Metrics) -> Self;
}

impl<O: Consumed, E> Tally for Result<O, E> {
    fn tally(self, metrics: &Metrics) -> Self {
        match &self {
            Ok(out) => metrics.record(&out.consumed(), O::WRITE),
            Err(_) => metrics.record(&[], O::WRITE),
        }
        self
    }
}

/// A snapshot of [`Metrics`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CapacityUsage {
    pub requests: u64,
    pub read_units: f64,
    pub write_units: f64,
}

impl Metrics {
    /// `is_write`: the operation writes, so a bare total (all DynamoDB Local reports) counts
    /// as write units.
    fn record(&self, capacity: &[&ConsumedCapacity], is_write: bool) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        for c in capacity {
            let read = c.read_capacity_units().unwrap_or(0.0);
            let write = c.write_capacity_units().unwrap_or(0.0);
            let total = c.capacity_units().unwrap_or(0.0);
            let (read, write) = match (read == 0.0 && write == 0.0, is_write) {
                (false, _) => (read, write),
                (true, false) => (total, 0.0),
                (true, true) => (0.0, total),
            };
            self.read_milli_units
                .fetch_add((read * 1000.0).round() as u64, Ordering::Relaxed);
            self.write_milli_units
                .fetch_add((write * 1000.0).round() as u64, Ordering::Relaxed);
        }
    }

    pub fn snapshot(&self) -> CapacityUsage {
        CapacityUsage {
            requests: self.requests.load(Ordering::Relaxed),
            read_units: self.read_milli_units.load(Ordering::Relaxed) as f64 / 1000.0,
            write_units: self.write_milli_units.load(Ordering::Relaxed) as f64 / 1000.0,
        }
    }
}

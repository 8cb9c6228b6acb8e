use super::*;

#[test]
fn a_worker_stops_once_the_queue_is_empty_and_runs_untokened_where_polling_is_unsupported() {
    // A pipe this process made cannot be polled (cargo's, reopened through /dev/fd, can).
    let client = jobserver::Client::new(0).unwrap();
    let queue = Mutex::new(std::collections::VecDeque::from(vec![0usize, 1]));
    assert!(matches!(wait_for_token(&client, &queue), Some(None)));
    // No token will ever come (cargo build -j1 gives a build script none): with the queue
    // empty the worker stops instead of waiting.
    queue.lock().unwrap().clear();
    assert!(wait_for_token(&client, &queue).is_none());
}

"""Request processors. Each module listed here exposes ``register(broker)``, which adds its
handlers to ``broker.remoting`` by request code; ``BrokerController.register_processors`` imports
them in this order. Keep one module per line (several engineers append here)."""

PROCESSOR_MODULES: tuple[str, ...] = (
    "rocketstore.broker.processor.client",
    "rocketstore.broker.processor.admin",
    "rocketstore.broker.processor.send",
    "rocketstore.broker.processor.pull",
    "rocketstore.broker.processor.consumer_offset",
    "rocketstore.broker.processor.query",
    "rocketstore.broker.processor.send_back",
    "rocketstore.broker.processor.lock",
)

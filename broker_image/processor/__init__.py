"""Request processors. Each module listed here exposes ``register(broker)``, which adds its
handlers to ``broker.remoting`` by request code; ``BrokerController.register_processors`` imports
them in this order. Keep one module per line (several engineers append here)."""

PROCESSOR_MODULES: tuple[str, ...] = (
    "broker_image.processor.client",
    "broker_image.processor.admin",
    "broker_image.processor.send",
    "broker_image.processor.pull",
    "broker_image.processor.consumer_offset",
    "broker_image.processor.query",
    "broker_image.processor.send_back",
    "broker_image.processor.lock",
)

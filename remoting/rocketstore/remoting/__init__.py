"""RocketMQ's remoting protocol (4.x clients): frames, commands, codes and headers, with no I/O."""

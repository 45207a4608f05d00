// Command go5-client drives the real RocketMQ 5.x Go client (github.com/apache/rocketmq-clients/golang/v5)
// for tests/compat/go5/test_go_5x_client.py. It prints one JSON object per line on stdout; "kind" says
// what it is:
//
//	produce -endpoint E -topic T -count N [-tag T] [-prop k=v]... [-group G] [-delay-ms D]
//	    -> {"kind": "sent", ...} per message
//	consume -endpoint E -topic T -group G -expect N [-mode M] [-invisible-ms I] [-timeout-ms T]
//	    [-await-ms A] [-request-timeout-ms R]
//	    -> {"kind": "received", ...} per delivery, {"kind": "acked", ...} per ack, then {"kind": "done"}
//
// Both take -access-key and -secret-key: the client signs every call (MQv2-HMAC-SHA1) with them;
// without them it sends an empty credential, which a broker without aclEnable ignores.
//
// consume modes: "ack" acks every delivery; "ignore-first" leaves a first delivery (attempt 1)
// unacked, so it comes back after its invisible time, and acks later ones; "nack-first" puts a
// first delivery back at once (ChangeInvisibleDuration 0) and acks later ones. It stops after
// -expect deliveries or -timeout-ms. Any error is printed as {"kind": "error"} and exits 1.
//
// -request-timeout-ms is the client's per-call timeout (its own default is 3 s): a receive gives up
// after -await-ms plus this. The default here is longer, so that a broker on a busy test machine that
// answers a long-polling receive a few seconds late is not taken for one that does not answer.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

// emit prints one JSON line; the test reads nothing else from stdout (the client logs to a file).
func emit(kind string, fields map[string]any) {
	fields["kind"] = kind
	line, err := json.Marshal(fields)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(line))
}

func nowMs() int64 { return time.Now().UnixMilli() }

// props collects repeated -prop k=v flags.
type props map[string]string

func (p props) String() string { return fmt.Sprint(map[string]string(p)) }

func (p props) Set(value string) error {
	key, val, ok := strings.Cut(value, "=")
	if !ok || key == "" {
		return fmt.Errorf("-prop %q is not key=value", value)
	}
	p[key] = val
	return nil
}

type common struct {
	endpoint, accessKey, secretKey string
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.endpoint, "endpoint", "", "the broker's gRPC endpoint, host:port")
	fs.StringVar(&c.accessKey, "access-key", "", "signs the calls with this access key")
	fs.StringVar(&c.secretKey, "secret-key", "", "and this secret key")
}

func (c *common) config(group string) *rmq.Config {
	return &rmq.Config{
		Endpoint:      c.endpoint,
		ConsumerGroup: group,
		Credentials:   &credentials.SessionCredentials{AccessKey: c.accessKey, AccessSecret: c.secretKey},
	}
}

func produce(args []string) error {
	fs := flag.NewFlagSet("produce", flag.ExitOnError)
	var c common
	c.register(fs)
	topic := fs.String("topic", "", "topic")
	count := fs.Int("count", 1, "how many messages")
	tag := fs.String("tag", "", "tag of every message")
	prefix := fs.String("body-prefix", "body", "bodies are PREFIX-INDEX, keys PREFIX-key-INDEX and PREFIX-alt-INDEX")
	group := fs.String("group", "", "message group: FIFO messages")
	delayMs := fs.Int64("delay-ms", 0, "delivery timestamp this far after sending: delayed messages")
	extra := props{}
	fs.Var(extra, "prop", "a user property k=v on every message (repeatable)")
	_ = fs.Parse(args)

	producer, err := rmq.NewProducer(c.config(""), rmq.WithTopics(*topic))
	if err != nil {
		return err
	}
	if err := producer.Start(); err != nil {
		return fmt.Errorf("producer start: %w", err)
	}
	defer func() { _ = producer.GracefulStop() }()
	for index := 0; index < *count; index++ {
		body := fmt.Sprintf("%s-%d", *prefix, index)
		msg := &rmq.Message{Topic: *topic, Body: []byte(body)}
		if *tag != "" {
			msg.SetTag(*tag)
		}
		msg.SetKeys(fmt.Sprintf("%s-key-%d", *prefix, index), fmt.Sprintf("%s-alt-%d", *prefix, index))
		msg.AddProperty("index", strconv.Itoa(index))
		for key, value := range extra {
			msg.AddProperty(key, value)
		}
		if *group != "" {
			msg.SetMessageGroup(*group)
		}
		at := nowMs()
		if *delayMs > 0 {
			msg.SetDelayTimestamp(time.UnixMilli(at + *delayMs))
		}
		receipts, err := producer.Send(context.Background(), msg)
		if err != nil {
			return fmt.Errorf("send %s: %w", body, err)
		}
		for _, receipt := range receipts {
			emit("sent", map[string]any{"index": index, "message_id": receipt.MessageID, "body": body,
				"offset": receipt.Offset, "at_ms": at})
		}
	}
	return nil
}

func consume(args []string) error {
	fs := flag.NewFlagSet("consume", flag.ExitOnError)
	var c common
	c.register(fs)
	topic := fs.String("topic", "", "topic")
	group := fs.String("group", "", "consumer group")
	expect := fs.Int("expect", 1, "stop after this many deliveries")
	mode := fs.String("mode", "ack", "ack | ignore-first | nack-first")
	tag := fs.String("tag", "*", "tag filter expression")
	invisibleMs := fs.Int64("invisible-ms", 30000, "invisible duration of each receive")
	awaitMs := fs.Int64("await-ms", 2000, "long polling of each receive")
	timeoutMs := fs.Int64("timeout-ms", 30000, "give up after this long")
	requestTimeoutMs := fs.Int64("request-timeout-ms", 10000, "the client's timeout of each call")
	_ = fs.Parse(args)
	switch *mode {
	case "ack", "ignore-first", "nack-first":
	default:
		return fmt.Errorf("-mode %q is not ack, ignore-first or nack-first", *mode)
	}

	requestTimeout := rmq.WithQueryRouteTimeout(time.Duration(*requestTimeoutMs) * time.Millisecond)
	consumer, err := rmq.NewSimpleConsumer(c.config(*group),
		rmq.WithClientFuncForSimpleConsumer(func(config *rmq.Config, opts ...rmq.ClientOption) (rmq.Client, error) {
			// named for route queries, this option sets the timeout of every call the client makes
			return rmq.NewClient(config, append(opts, requestTimeout)...)
		}),
		rmq.WithAwaitDuration(time.Duration(*awaitMs)*time.Millisecond),
		rmq.WithSubscriptionExpressions(map[string]*rmq.FilterExpression{*topic: rmq.NewFilterExpression(*tag)}))
	if err != nil {
		return err
	}
	if err := consumer.Start(); err != nil {
		return fmt.Errorf("simple consumer start: %w", err)
	}
	defer func() { _ = consumer.GracefulStop() }()
	deliveries := 0
	started := time.Now()
	deadline := started.Add(time.Duration(*timeoutMs) * time.Millisecond)
	for deliveries < *expect && time.Now().Before(deadline) {
		views, err := consumer.Receive(context.Background(), 16, time.Duration(*invisibleMs)*time.Millisecond)
		if status, ok := rmq.AsErrRpcStatus(err); ok && status.GetCode() == int32(v2.Code_MESSAGE_NOT_FOUND) {
			continue // long polling ended without a message: poll again (the client picks the next queue)
		}
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		for _, view := range views {
			deliveries++
			keys := append([]string(nil), view.GetKeys()...)
			sort.Strings(keys)
			fields := map[string]any{"message_id": view.GetMessageId(), "topic": view.GetTopic(),
				"body": string(view.GetBody()), "keys": keys, "properties": view.GetProperties(),
				"attempt": view.GetDeliveryAttempt(), "offset": view.GetOffset(), "at_ms": nowMs(),
				"tag": nil, "message_group": nil, "delivery_ms": nil, "born_ms": nil}
			if t := view.GetTag(); t != nil {
				fields["tag"] = *t
			}
			if g := view.GetMessageGroup(); g != nil {
				fields["message_group"] = *g
			}
			if d := view.GetDeliveryTimestamp(); d != nil {
				fields["delivery_ms"] = d.UnixMilli()
			}
			if b := view.GetBornTimestamp(); b != nil {
				fields["born_ms"] = b.UnixMilli()
			}
			emit("received", fields)
			first := view.GetDeliveryAttempt() <= 1
			switch {
			case *mode == "ignore-first" && first:
			case *mode == "nack-first" && first:
				if err := consumer.ChangeInvisibleDuration(view, 0); err != nil {
					return fmt.Errorf("change invisible duration of %s: %w", view.GetMessageId(), err)
				}
				emit("nacked", map[string]any{"message_id": view.GetMessageId()})
			default:
				if err := consumer.Ack(context.Background(), view); err != nil {
					return fmt.Errorf("ack %s: %w", view.GetMessageId(), err)
				}
				emit("acked", map[string]any{"message_id": view.GetMessageId()})
			}
		}
	}
	emit("done", map[string]any{"deliveries": deliveries})
	return nil
}

func main() {
	// The client logs to ${rocketmq.client.logRoot}/rocketmq_client_go.log; its default root is
	// "/logs/rocketmqlogs" (it reads a "user.home" variable nobody sets). Keep it under $HOME.
	if os.Getenv("rocketmq.client.logRoot") == "" {
		home, _ := os.UserHomeDir()
		_ = os.Setenv("rocketmq.client.logRoot", filepath.Join(home, "logs", "rocketmqlogs"))
		rmq.ResetLogger()
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: go5-client produce|consume FLAGS")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "produce":
		err = produce(os.Args[2:])
	case "consume":
		err = consume(os.Args[2:])
	default:
		err = errors.New("unknown command " + os.Args[1])
	}
	if err != nil {
		emit("error", map[string]any{"error": err.Error()})
		os.Exit(1)
	}
}

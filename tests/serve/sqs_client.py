#!/usr/bin/env python3
"""q serve against boto3, the SQS client nobody here wrote.

Run by test_serve.sh with Debian's python3 (boto3 1.26: the query protocol)
and with the newer pip boto3 (1.43: AWS JSON 1.0). Usage:
  sqs_client.py ENDPOINT KEY SECRET PREFIX
Prints what it checks; exits 1 at the first failure.
"""
import hashlib
import json
import sys
import threading
import time

import boto3
import botocore
from botocore.config import Config
from botocore.exceptions import ClientError

endpoint, key, secret, prefix = sys.argv[1:5]
scale = float(__import__("os").environ.get("Q_TEST_TIME_SCALE", "1"))


def client(secret_key=secret):
    return boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=key, aws_secret_access_key=secret_key,
                        config=Config(retries={"max_attempts": 1}))


sqs = client()
print(f"boto3 {boto3.__version__} botocore {botocore.__version__}: {endpoint}")


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}")
        sys.exit(1)
    print(f"ok: {what}")


def error_code(fn, *args, **kw):
    try:
        fn(*args, **kw)
    except ClientError as e:
        return e.response["Error"]["Code"]
    return None


def attrs(url, *names):
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=list(names) or ["All"])["Attributes"]


# A wrong secret is refused and touches nothing.
code = error_code(client("wrong-secret").create_queue, QueueName=f"{prefix}-nope")
check(code == "SignatureDoesNotMatch", f"a wrong secret is refused ({code})")
check(error_code(sqs.get_queue_url, QueueName=f"{prefix}-nope") ==
      "AWS.SimpleQueueService.NonExistentQueue", "the refused request created nothing")

# The sign-up rush: producers at 167/s, consumers at 50/s in all, poison
# messages dead-lettered after maxReceiveCount, redriven by StartMessageMoveTask.
dlq = sqs.create_queue(QueueName=f"{prefix}-signups-dlq")["QueueUrl"]
dlq_arn = attrs(dlq, "QueueArn")["QueueArn"]
src = sqs.create_queue(QueueName=f"{prefix}-signups", Attributes={
    "VisibilityTimeout": "1",
    "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 2})})["QueueUrl"]
check(json.loads(attrs(src, "RedrivePolicy")["RedrivePolicy"])["maxReceiveCount"] == 2,
      "RedrivePolicy reads back")
check(sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [src],
      "ListDeadLetterSourceQueues names the source")

sent, lock = {}, threading.Lock()
POISON_EVERY = 25


def producer(n, offset):
    start = time.monotonic()
    for i in range(n):
        k = offset + i
        body = json.dumps({"user": k, "poison": k % POISON_EVERY == 0})
        r = sqs.send_message(QueueUrl=src, MessageBody=body, MessageAttributes={
            "kind": {"DataType": "String", "StringValue": "signup"},
            "n": {"DataType": "Number", "StringValue": str(k)}})
        check_md5 = hashlib.md5(body.encode()).hexdigest() == r["MD5OfMessageBody"]
        if not check_md5:
            print("FAIL: MD5OfMessageBody")
            sys.exit(1)
        with lock:
            sent[r["MessageId"]] = k
        delay = start + (i + 1) / (167 / 2) - time.monotonic()
        if delay > 0:
            time.sleep(delay)


deleted, poison_seen = {}, set()


def consumer(stop):
    c = client()
    start, taken = time.monotonic(), 0
    while not stop.is_set():
        got = c.receive_message(QueueUrl=src, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                MessageAttributeNames=["All"], AttributeNames=["All"])
        for m in got.get("Messages", []):
            taken += 1
            body = json.loads(m["Body"])
            if body["poison"]:
                with lock:
                    poison_seen.add(m["MessageId"])
                continue  # never deleted: dead-lettered after 2 receives
            assert m["MessageAttributes"]["kind"]["StringValue"] == "signup"
            c.delete_message(QueueUrl=src, ReceiptHandle=m["ReceiptHandle"])
            with lock:
                deleted[m["MessageId"]] = deleted.get(m["MessageId"], 0) + 1
        delay = start + taken / 25 - time.monotonic()  # 25/s each, 50/s in all
        if delay > 0:
            time.sleep(delay)


N = 300
stop = threading.Event()
producers = [threading.Thread(target=producer, args=(N // 2, i * N // 2)) for i in range(2)]
consumers = [threading.Thread(target=consumer, args=(stop,)) for _ in range(2)]
for t in producers + consumers:
    t.start()
for t in producers:
    t.join()
poison = {i for i, k in sent.items() if k % POISON_EVERY == 0}
deadline = time.monotonic() + 60 * scale
while time.monotonic() < deadline:
    with lock:
        if set(deleted) == set(sent) - poison:
            break
    time.sleep(0.2)
# The poison messages die after their second receive: wait for the DLQ to hold them all.
while time.monotonic() < deadline and int(attrs(dlq, "ApproximateNumberOfMessages")
                                          ["ApproximateNumberOfMessages"]) < len(poison):
    time.sleep(0.2)
stop.set()
for t in consumers:
    t.join()
check(len(sent) == N, f"{N} sign-ups sent")
check(set(deleted) == set(sent) - poison, f"every good one received and deleted ({len(deleted)})")
check(int(attrs(dlq)["ApproximateNumberOfMessages"]) == len(poison),
      f"the {len(poison)} poison messages are in the DLQ")
a = attrs(src)
check(a["ApproximateNumberOfMessages"] == "0" and a["ApproximateNumberOfMessagesNotVisible"] == "0",
      "the source queue is empty")
if hasattr(sqs, "start_message_move_task"):
    task = sqs.start_message_move_task(SourceArn=dlq_arn)["TaskHandle"]
    tasks = sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"]
    check(tasks[0]["TaskHandle"] == task and tasks[0]["Status"] == "COMPLETED" and
          tasks[0]["ApproximateNumberOfMessagesMoved"] == len(poison),
          "StartMessageMoveTask moved them back")
    check(attrs(src)["ApproximateNumberOfMessages"] == str(len(poison)),
          "the redriven messages are in the source queue")
    code = error_code(sqs.cancel_message_move_task, TaskHandle=task)
    check(code is not None, f"a completed task cannot be cancelled ({code})")
else:
    print("note: this botocore has no StartMessageMoveTask (added in 1.31); q redrive does it")

# Message attributes of every type, their MD5 checked by botocore.
q2 = sqs.create_queue(QueueName=f"{prefix}-attrs")["QueueUrl"]
r = sqs.send_message(QueueUrl=q2, MessageBody="héllo <&> \r\n", MessageAttributes={
    "s": {"DataType": "String", "StringValue": "ünï"},
    "b": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
    "n": {"DataType": "Number.int", "StringValue": "42"}})
m = sqs.receive_message(QueueUrl=q2, MessageAttributeNames=["All"], AttributeNames=["All"])["Messages"][0]
check(m["Body"] == "héllo <&> \r\n", "the body comes back byte for byte")
check(m["MessageAttributes"]["b"]["BinaryValue"] == b"\x00\x01\xff" and
      m["MessageAttributes"]["n"]["DataType"] == "Number.int", "typed attributes come back")
check(m["MD5OfMessageAttributes"] == r["MD5OfMessageAttributes"], "MD5OfMessageAttributes agree")
check(m["Attributes"]["ApproximateReceiveCount"] == "1", "ApproximateReceiveCount")
# A stale handle on a standard queue: accepted, nothing deleted (SQS's behaviour).
sqs.change_message_visibility(QueueUrl=q2, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
m2 = sqs.receive_message(QueueUrl=q2)["Messages"][0]
sqs.delete_message(QueueUrl=q2, ReceiptHandle=m["ReceiptHandle"])
check(attrs(q2)["ApproximateNumberOfMessagesNotVisible"] == "1",
      "a stale handle's DeleteMessage succeeds and deletes nothing")
code = error_code(sqs.delete_message, QueueUrl=q2, ReceiptHandle="not-a-receipt")
check(code == "ReceiptHandleIsInvalid", f"a malformed handle is refused ({code})")
sqs.delete_message(QueueUrl=q2, ReceiptHandle=m2["ReceiptHandle"])

# Batches.
r = sqs.send_message_batch(QueueUrl=q2, Entries=[
    {"Id": f"e{i}", "MessageBody": f"b{i}"} for i in range(10)])
check(len(r["Successful"]) == 10, "SendMessageBatch of 10")
code = error_code(sqs.send_message_batch, QueueUrl=q2, Entries=[
    {"Id": f"e{i}", "MessageBody": "x"} for i in range(11)])
check(code == "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", f"11 entries refused ({code})")
got = sqs.receive_message(QueueUrl=q2, MaxNumberOfMessages=10)["Messages"]
r = sqs.delete_message_batch(QueueUrl=q2, Entries=[
    {"Id": f"d{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)])
check(len(r["Successful"]) == len(got) and not r.get("Failed"), "DeleteMessageBatch")
code = error_code(sqs.receive_message, QueueUrl=q2, MaxNumberOfMessages=11)
check(code == "InvalidParameterValue", f"MaxNumberOfMessages 11 refused ({code})")

# ChangeMessageVisibility above 0 extends the lease from now, the handle staying good.
sqs.send_message(QueueUrl=q2, MessageBody="cmv")
m = sqs.receive_message(QueueUrl=q2, VisibilityTimeout=1)["Messages"][0]
sqs.change_message_visibility(QueueUrl=q2, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=30)
time.sleep(1.5)
check(not sqs.receive_message(QueueUrl=q2).get("Messages"),
      "ChangeMessageVisibility 30 keeps it hidden past its first timeout of 1 s")
# ChangeMessageVisibilityBatch: an entry without VisibilityTimeout fails alone
# (MissingParameter) and leaves the message hidden; one with 0 releases it.
r = sqs.change_message_visibility_batch(QueueUrl=q2, Entries=[
    {"Id": "nothing", "ReceiptHandle": m["ReceiptHandle"]},
    {"Id": "zero", "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}])
check([e["Id"] for e in r.get("Successful", [])] == ["zero"] and
      [(e["Id"], e["Code"]) for e in r.get("Failed", [])] == [("nothing", "MissingParameter")],
      f"ChangeMessageVisibilityBatch: no VisibilityTimeout is MissingParameter ({r.get('Failed')})")
# VisibilityTimeout 0 is q's nack: the delivery ended, so its handle deletes
# nothing even before the message is received again (SQS would delete it).
sqs.delete_message(QueueUrl=q2, ReceiptHandle=m["ReceiptHandle"])
m3 = sqs.receive_message(QueueUrl=q2)["Messages"][0]
check(m3["MessageId"] == m["MessageId"],
      "VisibilityTimeout 0 released it, and the old handle's DeleteMessage deleted nothing")
# ChangeMessageVisibility(0) is q's nack, a new delivery: the old handle is
# stale once the message is received again (README, differences from SQS).
code = error_code(sqs.change_message_visibility, QueueUrl=q2, ReceiptHandle=m["ReceiptHandle"],
                  VisibilityTimeout=5)
check(code in ("AWS.SimpleQueueService.MessageNotInflight", "MessageNotInflight"),
      f"ChangeMessageVisibility with a stale handle: MessageNotInflight ({code})")
sqs.delete_message(QueueUrl=q2, ReceiptHandle=m3["ReceiptHandle"])

# AWSTraceHeader is accepted and not kept (README, differences from SQS).
sqs.send_message(QueueUrl=q2, MessageBody="traced", MessageSystemAttributes={
    "AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-5759e988-bd862e3fe1be46a994272793"}})
m = sqs.receive_message(QueueUrl=q2, AttributeNames=["All"])["Messages"][0]
check(m["Body"] == "traced" and "AWSTraceHeader" not in m.get("Attributes", {}),
      "AWSTraceHeader is accepted and not returned")
sqs.delete_message(QueueUrl=q2, ReceiptHandle=m["ReceiptHandle"])

# SetQueueAttributes, read back; DelaySeconds holds a message back.
sq = sqs.create_queue(QueueName=f"{prefix}-set")["QueueUrl"]
want = {"VisibilityTimeout": "7", "DelaySeconds": "2", "ReceiveMessageWaitTimeSeconds": "3",
        "MessageRetentionPeriod": "3600", "MaximumMessageSize": "2048"}
sqs.set_queue_attributes(QueueUrl=sq, Attributes=want)
got = attrs(sq)
check({k: got.get(k) for k in want} == want, f"SetQueueAttributes reads back ({got})")
sqs.send_message(QueueUrl=sq, MessageBody="later")
check(attrs(sq)["ApproximateNumberOfMessagesDelayed"] == "1", "the queue's DelaySeconds delays a send")
code = error_code(sqs.send_message, QueueUrl=sq, MessageBody="x" * 2049)
check(code == "InvalidParameterValue", f"MaximumMessageSize 2048 refuses 2049 bytes ({code})")
code = error_code(sqs.set_queue_attributes, QueueUrl=sq, Attributes={"VisibilityTimeout": "43201"})
check(code in ("InvalidAttributeValue", "InvalidParameterValue"),
      f"SetQueueAttributes out of range is refused ({code})")
check(sqs.get_queue_url(QueueName=f"{prefix}-set")["QueueUrl"] == sq, "GetQueueUrl")
# CreateQueue of an existing queue with other settings.
code = error_code(sqs.create_queue, QueueName=f"{prefix}-set", Attributes={"VisibilityTimeout": "8"})
check(code in ("QueueAlreadyExists", "QueueNameExists"), f"QueueAlreadyExists ({code})")
check(sqs.create_queue(QueueName=f"{prefix}-set", Attributes=want)["QueueUrl"] == sq,
      "CreateQueue with the same settings gives the queue")
# An action q serve does not have.
for call, kw in ((sqs.tag_queue, {"Tags": {"team": "a"}}), (sqs.list_queue_tags, {})):
    code = error_code(call, QueueUrl=sq, **kw)
    check(code in ("AWS.SimpleQueueService.UnsupportedOperation", "UnsupportedOperation"),
          f"{call.__name__}: UnsupportedOperation ({code})")
sqs.delete_queue(QueueUrl=sq)

# FIFO: each group in send order, one delivery of a group at a time.
fifo = sqs.create_queue(QueueName=f"{prefix}-orders.fifo", Attributes={
    "FifoQueue": "true", "ContentBasedDeduplication": "true"})["QueueUrl"]
for i in range(6):
    sqs.send_message(QueueUrl=fifo, MessageBody=f"{'ab'[i % 2]}{i}", MessageGroupId="ab"[i % 2])
dup = sqs.send_message(QueueUrl=fifo, MessageBody="a0", MessageGroupId="a")
order = []
while True:
    got = sqs.receive_message(QueueUrl=fifo, MaxNumberOfMessages=10,
                              AttributeNames=["MessageGroupId"]).get("Messages", [])
    if not got:
        break
    for m in got:
        order.append(m["Body"])
        sqs.delete_message(QueueUrl=fifo, ReceiptHandle=m["ReceiptHandle"])
check([b for b in order if b[0] == "a"] == ["a0", "a2", "a4"] and
      [b for b in order if b[0] == "b"] == ["b1", "b3", "b5"],
      f"FIFO groups in order, the duplicate dropped ({order})")
code = error_code(sqs.send_message, QueueUrl=fifo, MessageBody="x")
check(code == "MissingParameter", f"FIFO without MessageGroupId refused ({code})")
# SequenceNumber grows with the send order within a group, across 20 sends
# (so across a carry of q's hex ids, m1f then m20), in the replies and received.
seqs = [sqs.send_message(QueueUrl=fifo, MessageBody=f"s{i}", MessageGroupId="s")["SequenceNumber"]
        for i in range(20)]
check(all(int(a) < int(b) for a, b in zip(seqs, seqs[1:])),
      f"SequenceNumber grows with each send ({seqs[0]}..{seqs[-1]})")
got = []
while len(got) < 20:
    ms = sqs.receive_message(QueueUrl=fifo, MaxNumberOfMessages=10,
                             AttributeNames=["All"]).get("Messages", [])
    if not ms:
        break
    for m in ms:
        got.append(m["Attributes"]["SequenceNumber"])
        sqs.delete_message(QueueUrl=fifo, ReceiptHandle=m["ReceiptHandle"])
check(got == seqs, "received in that order with the same SequenceNumbers")
# A stale handle on FIFO is refused as expired (README, differences from SQS).
sqs.send_message(QueueUrl=fifo, MessageBody="once", MessageGroupId="st")
m = sqs.receive_message(QueueUrl=fifo)["Messages"][0]
sqs.change_message_visibility(QueueUrl=fifo, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
m2 = sqs.receive_message(QueueUrl=fifo)["Messages"][0]
code = error_code(sqs.delete_message, QueueUrl=fifo, ReceiptHandle=m["ReceiptHandle"])
check(code == "InvalidParameterValue" and m2["Body"] == "once",
      f"FIFO: a stale handle's DeleteMessage is refused ({code})")
sqs.delete_message(QueueUrl=fifo, ReceiptHandle=m2["ReceiptHandle"])

# A long poll woken by a send.
lp = sqs.create_queue(QueueName=f"{prefix}-longpoll")["QueueUrl"]
result = {}


def poll():
    t0 = time.monotonic()
    got = client().receive_message(QueueUrl=lp, WaitTimeSeconds=20).get("Messages", [])
    result["elapsed"], result["n"] = time.monotonic() - t0, len(got)


t = threading.Thread(target=poll)
t.start()
time.sleep(1.0)
t0 = time.monotonic()
sqs.send_message(QueueUrl=lp, MessageBody="wake up")
t.join()
check(result["n"] == 1 and result["elapsed"] < 5 * scale,
      f"a long poll is woken by a send ({result['elapsed']:.2f}s into its 20s)")

names = [u.rsplit("/", 1)[1] for u in sqs.list_queues(QueueNamePrefix=prefix)["QueueUrls"]]
check(sorted(names) == sorted([f"{prefix}-signups-dlq", f"{prefix}-signups", f"{prefix}-attrs",
                               f"{prefix}-orders.fifo", f"{prefix}-longpoll"]),
      "ListQueues by prefix")
page = sqs.list_queues(QueueNamePrefix=prefix, MaxResults=2)
first_page, paged = len(page["QueueUrls"]), [u.rsplit("/", 1)[1] for u in page["QueueUrls"]]
while page.get("NextToken"):
    page = sqs.list_queues(QueueNamePrefix=prefix, MaxResults=2, NextToken=page["NextToken"])
    paged += [u.rsplit("/", 1)[1] for u in page.get("QueueUrls", [])]
check(first_page == 2 and sorted(paged) == sorted(names), f"ListQueues pages by MaxResults ({paged})")
sqs.send_message(QueueUrl=lp, MessageBody="purged")
sqs.purge_queue(QueueUrl=lp)
check(attrs(lp)["ApproximateNumberOfMessages"] == "0", "PurgeQueue removes the waiting message")
sqs.delete_queue(QueueUrl=lp)
check(error_code(sqs.get_queue_url, QueueName=f"{prefix}-longpoll") ==
      "AWS.SimpleQueueService.NonExistentQueue", "DeleteQueue")
print("PASS")

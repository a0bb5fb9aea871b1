/* The JetStream floor for q on NATS: the same work done with nats.c alone,
 * on a stream shaped like a q queue's (work-queue retention, file storage,
 * R3 on a 3-node cluster, one durable pull consumer with explicit acks).
 *
 *   nats_floor URL setup STREAM     make the stream (subject STREAM.m) and
 *                                   its consumer "f", or leave them
 *   nats_floor URL send STREAM      one js_Publish of a short body, exit
 *                                   (the floor of a one-shot `q send`)
 *   nats_floor URL bulk STREAM N    N publishes by js_PublishAsync, then
 *                                   wait for every ack (`q send --lines`)
 *   nats_floor URL take STREAM B    one Fetch(B) and an AckSync of each
 *                                   message, exit 1 when none came (a
 *                                   `q receive -n B | q ack` pair)
 *   nats_floor URL drain STREAM B [async]
 *                                   Fetch(B) + AckSync of each (async:
 *                                   natsMsg_Ack, no wait) until a fetch finds
 *                                   nothing; prints messages per second
 *                                   (one `q work` consumer)
 *   nats_floor URL left STREAM      messages not yet acked (0 once drained)
 *
 * URL may carry several servers, comma-separated. bench/nats_speed.py runs it
 * beside q. Build: cc -O2 -o nats_floor nats_floor.c $(pkg-config --cflags
 * --libs libnats)
 */
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void die(const char *what, natsStatus s, jsErrCode code) {
  fprintf(stderr, "nats_floor: %s: %s (JetStream error %d)\n", what, natsStatus_GetText(s),
          (int)code);
  exit(2);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void setup(jsCtx *js, const char *stream, const char *subject, int replicas) {
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  cfg.Name = stream;
  const char *subjects[] = {subject};
  cfg.Subjects = subjects;
  cfg.SubjectsLen = 1;
  cfg.Retention = js_WorkQueuePolicy;
  cfg.Storage = js_FileStorage;
  cfg.Replicas = replicas;
  jsErrCode code = 0;
  jsStreamInfo *si = NULL;
  natsStatus s = js_AddStream(&si, js, &cfg, NULL, &code);
  if (s != NATS_OK && code != 10058) die("adding the stream", s, code);
  jsStreamInfo_Destroy(si);
  jsConsumerConfig cc;
  jsConsumerConfig_Init(&cc);
  cc.Durable = "f";
  cc.AckPolicy = js_AckExplicit;
  cc.AckWait = 30LL * 1000000000LL;
  cc.MaxAckPending = 1 << 30;
  jsConsumerInfo *ci = NULL;
  s = js_AddConsumer(&ci, js, stream, &cc, NULL, &code);
  if (s != NATS_OK) die("adding the consumer", s, code);
  jsConsumerInfo_Destroy(ci);
}

/* Fetches up to `batch` and acks each; returns how many came. wait_ms 0:
 * what is there, without waiting for more (as a q receive without --wait). */
static int take(natsSubscription *sub, int batch, int async, int wait_ms) {
  natsMsgList list = {0};
  jsErrCode code = 0;
  jsFetchRequest req;
  jsFetchRequest_Init(&req);
  req.Batch = batch;
  req.NoWait = wait_ms == 0;
  /* nats.c 3.4.1 waits out Expires when a no-wait fetch finds nothing. */
  req.Expires = (wait_ms == 0 ? 200LL : (int64_t)wait_ms) * 1000000LL;
  natsStatus s = wait_ms == 0 ? natsSubscription_FetchRequest(&list, sub, &req)
                              : natsSubscription_Fetch(&list, sub, batch, wait_ms, &code);
  if (s == NATS_TIMEOUT || s == NATS_NOT_FOUND) return 0;
  if (s != NATS_OK) die("fetching", s, code);
  for (int i = 0; i < list.Count; i++) {
    s = async ? natsMsg_Ack(list.Msgs[i], NULL) : natsMsg_AckSync(list.Msgs[i], NULL, &code);
    if (s != NATS_OK) die("acking", s, code);
  }
  int n = list.Count;
  natsMsgList_Destroy(&list);
  return n;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: nats_floor URL setup|send|bulk|take|drain STREAM [N|B] [async]\n");
    return 64;
  }
  const char *url = argv[1], *mode = argv[2], *stream = argv[3];
  char subject[256];
  snprintf(subject, sizeof subject, "%s.m", stream);
  natsOptions *opts = NULL;
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  const char *servers[16];
  int count = 0;
  char *urls = strdup(url);
  for (char *tok = strtok(urls, ","); tok && count < 16; tok = strtok(NULL, ","))
    servers[count++] = tok;
  natsStatus s = natsOptions_Create(&opts);
  if (s == NATS_OK) s = natsOptions_SetServers(opts, servers, count);
  if (s == NATS_OK) s = natsConnection_Connect(&nc, opts);
  if (s == NATS_OK) s = natsConnection_JetStream(&js, nc, NULL);
  if (s != NATS_OK) die("connecting", s, 0);
  const char body[] = "send a welcome email to sign-up 4182";
  int rc = 0;
  if (strcmp(mode, "setup") == 0) {
    setup(js, stream, subject, argc > 4 ? atoi(argv[4]) : 3);
  } else if (strcmp(mode, "send") == 0) {
    jsErrCode code = 0;
    jsPubAck *pa = NULL;
    s = js_Publish(&pa, js, subject, body, (int)sizeof body - 1, NULL, &code);
    if (s != NATS_OK) die("publishing", s, code);
    jsPubAck_Destroy(pa);
  } else if (strcmp(mode, "bulk") == 0 && argc > 4) {
    long n = atol(argv[4]);
    for (long i = 0; i < n; i++) {
      s = js_PublishAsync(js, subject, body, (int)sizeof body - 1, NULL);
      if (s != NATS_OK) die("publishing", s, 0);
    }
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = 60000;
    s = js_PublishAsyncComplete(js, &po);
    if (s != NATS_OK) die("waiting for the acks", s, 0);
    natsMsgList pending = {0};
    if (js_PublishAsyncGetPendingList(&pending, js) == NATS_OK && pending.Count > 0) {
      fprintf(stderr, "nats_floor: %d publishes not acknowledged\n", pending.Count);
      rc = 1;
    }
    natsMsgList_Destroy(&pending);
  } else if ((strcmp(mode, "take") == 0 || strcmp(mode, "drain") == 0) && argc > 4) {
    int batch = atoi(argv[4]);
    int async = argc > 5 && strcmp(argv[5], "async") == 0;
    natsSubscription *sub = NULL;
    jsErrCode code = 0;
    s = js_PullSubscribe(&sub, js, subject, "f", NULL, NULL, &code);
    if (s != NATS_OK) die("binding to the consumer", s, code);
    if (mode[0] == 't') {
      rc = take(sub, batch, 0, 0) > 0 ? 0 : 1;
    } else {
      long total = 0;
      double t0 = now_s();
      int n;
      while ((n = take(sub, batch, async, 500)) > 0) total += n;
      double t = now_s() - t0 - 0.5; /* the last, empty fetch waited 500 ms */
      printf("%ld messages, %.0f/s\n", total, t > 0 ? (double)total / t : 0.0);
    }
    natsSubscription_Destroy(sub);
  } else if (strcmp(mode, "left") == 0) {
    jsErrCode code = 0;
    jsConsumerInfo *ci = NULL;
    s = js_GetConsumerInfo(&ci, js, stream, "f", NULL, &code);
    if (s != NATS_OK) die("reading the consumer", s, code);
    printf("%llu\n", (unsigned long long)(ci->NumPending + (uint64_t)ci->NumAckPending));
    jsConsumerInfo_Destroy(ci);
  } else {
    fprintf(stderr, "nats_floor: unknown mode %s\n", mode);
    rc = 64;
  }
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  natsOptions_Destroy(opts);
  free(urls);
  return rc;
}

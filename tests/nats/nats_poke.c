/* nats_poke: raw JetStream changes behind q's back, for tests that make q's
 * records and JetStream's streams disagree on purpose (test_nats_verify.sh).
 * The `nats` CLI is not installed here; this is the few calls those tests need.
 *   nats_poke URLS del-msg STREAM SEQ        delete one message of a stream
 *   nats_poke URLS del-stream STREAM         delete a stream
 *   nats_poke URLS add-stream STREAM SUBJECT add a stream (work-queue, R1)
 *   nats_poke URLS del-consumer STREAM NAME  delete a consumer
 *   nats_poke URLS pub SUBJECT DATA          a JetStream publish (KV: $KV.BUCKET.KEY)
 *   nats_poke URLS count STREAM FILTER       print how many subjects of STREAM match FILTER
 *   nats_poke URLS old-consumer STREAM NAME  a durable explicit-ack pull consumer as nats.c
 *                                            makes it without max_ack_pending (the server's 1000)
 * URLS: nats://h1:p1,h2:p2 (a q location without its /NAMESPACE).
 * Exit 0 when done, 1 with the error on stderr. */
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed(const char* what, natsStatus s, jsErrCode code) {
  fprintf(stderr, "nats_poke: %s: %s (%s, jetstream error %d)\n", what, natsStatus_GetText(s),
          nats_GetLastError(NULL), (int)code);
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: nats_poke URLS COMMAND ARGS...\n");
    return 2;
  }
  natsConnection* nc = NULL;
  jsCtx* js = NULL;
  jsErrCode code = 0;
  natsStatus s = natsConnection_ConnectTo(&nc, argv[1]);
  if (s == NATS_OK) s = natsConnection_JetStream(&js, nc, NULL);
  if (s != NATS_OK) return failed("connect", s, 0);
  const char* cmd = argv[2];
  if (!strcmp(cmd, "del-msg") && argc == 5) {
    s = js_DeleteMsg(js, argv[3], strtoull(argv[4], NULL, 10), NULL, &code);
  } else if (!strcmp(cmd, "del-stream") && argc == 4) {
    s = js_DeleteStream(js, argv[3], NULL, &code);
  } else if (!strcmp(cmd, "add-stream") && argc == 5) {
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    const char* subjects[] = {argv[4]};
    cfg.Name = argv[3];
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Retention = js_WorkQueuePolicy;
    jsStreamInfo* si = NULL;
    s = js_AddStream(&si, js, &cfg, NULL, &code);
    jsStreamInfo_Destroy(si);
  } else if (!strcmp(cmd, "del-consumer") && argc == 5) {
    s = js_DeleteConsumer(js, argv[3], argv[4], NULL, &code);
  } else if (!strcmp(cmd, "pub") && argc == 5) {
    jsPubAck* pa = NULL;
    s = js_Publish(&pa, js, argv[3], argv[4], (int)strlen(argv[4]), NULL, &code);
    jsPubAck_Destroy(pa);
  } else if (!strcmp(cmd, "old-consumer") && argc == 5) {
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = argv[4];
    cc.AckPolicy = js_AckExplicit;
    cc.DeliverPolicy = js_DeliverAll;
    cc.AckWait = 30LL * 1000 * 1000 * 1000;
    cc.MaxDeliver = -1;
    cc.MaxAckPending = -1; /* left out of the request by nats.c 3.4.1 */
    jsConsumerInfo* ci = NULL;
    s = js_AddConsumer(&ci, js, argv[3], &cc, NULL, &code);
    if (s == NATS_OK) printf("%lld\n", (long long)ci->Config->MaxAckPending);
    jsConsumerInfo_Destroy(ci);
  } else if (!strcmp(cmd, "count") && argc == 5) {
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Stream.Info.SubjectsFilter = argv[4];
    jsStreamInfo* si = NULL;
    s = js_GetStreamInfo(&si, js, argv[3], &jo, &code);
    if (s == NATS_OK) printf("%d\n", si->State.Subjects ? si->State.Subjects->Count : 0);
    jsStreamInfo_Destroy(si);
  } else {
    fprintf(stderr, "nats_poke: unknown command or wrong arguments: %s\n", cmd);
    return 2;
  }
  if (s != NATS_OK) return failed(cmd, s, code);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  return 0;
}

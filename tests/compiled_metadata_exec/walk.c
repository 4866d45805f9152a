/* The runtime of tests/compiled_metadata.rs for JIT images of other targets, its part
 * that every target shares: a collector (`gc_point`) and an unwinder (`throw`) over the
 * tables the test writes before it (BODIES, ROOTS, SITES), for the calls it asks for
 * (CALLS). The target's part (`aarch64.c`, `windows.c`) follows: how a handler is
 * entered (`resume`), how faults are caught, the loop of calls. Each call writes a line on
 * standard output:
 *   F <signal or exception code> <pc in hex>   the call faulted
 *   R <value> W <bodies...>                    it returned; the bodies its last walk went through
 *   X <status>                                 a forked call's child ended otherwise
 * Frames are Cranelift's and this runtime's own (built with frame pointers): the caller's
 * frame pointer at [fp], the return address into it at [fp + 8]. The stack pointer at a
 * call is the frame pointer less the distance its stack map or exception table gives, as
 * Wasmtime finds it. RUNTIME_ABI is the convention the JIT's code calls the runtime in. */
#include <string.h>

static int64_t WORD_OF_THE_CALL;
static int WALKED[16];
static int WALKED_LEN;

static int body_of(uint64_t pc) {
  for (int i = 0; i < (int)(sizeof BODIES / sizeof BODIES[0]); i++)
    if (BODIES[i].start <= pc && pc < BODIES[i].end) return i;
  return -1;
}

static void walked(int body) {
  if (WALKED_LEN < 16) WALKED[WALKED_LEN++] = body;
}

/* Enter a handler as Cranelift expects it: the call site's stack and frame pointers, the
 * payload in the first two payload registers (the target's). */
__attribute__((noreturn)) static void resume(uint64_t pc, uint64_t sp, uint64_t fp, int64_t payload);

/* Walk the frames of the table's code above the runtime's function whose frame record is
 * at `frame`, calling `visit` with each one's return address, frame pointer and `arg`. */
static void walk_frames(uint64_t *frame, void (*visit)(uint64_t, uint64_t *, int64_t), int64_t arg) {
  uint64_t ra = frame[1];
  uint64_t *fp = (uint64_t *)frame[0];
  WALKED_LEN = 0;
  for (int b; (b = body_of(ra)) >= 0; ra = fp[1], fp = (uint64_t *)fp[0]) {
    walked(b);
    visit(ra, fp, arg);
  }
}

static void move_roots(uint64_t ra, uint64_t *fp, int64_t unused) {
  (void)unused;
  for (int i = 0; i < (int)(sizeof ROOTS / sizeof ROOTS[0]); i++) {
    if (ROOTS[i].ret != ra) continue;
    int64_t *root = (int64_t *)((uint64_t)fp - ROOTS[i].span + ROOTS[i].offset);
    *root += MOVED_BY;
  }
}

/* Resume at the first handler of the call site returning to `ra` that takes `thrown`: the
 * tag `thrown % 16` for the instance `thrown / 16`. A handler takes it when it is a
 * `default`, or its tag is the thrown one and, under a dynamic context, the context (a
 * word at an offset from the call's stack pointer) is the thrown instance. */
static void catch_tag(uint64_t ra, uint64_t *fp, int64_t thrown) {
  int64_t tag = thrown & 15, instance = thrown >> 4;
  for (int i = 0; i < (int)(sizeof SITES / sizeof SITES[0]); i++) {
    if (SITES[i].ret != ra) continue;
    uint64_t sp = (uint64_t)fp - SITES[i].frame_offset;
    int takes = SITES[i].tag == -1 ||
                (SITES[i].tag == tag && (SITES[i].context < 0 || *(int64_t *)(sp + SITES[i].context) == instance));
    if (takes) resume(SITES[i].handler, sp, (uint64_t)fp, PAYLOAD_PER_TAG * tag);
  }
}

/* `gc_point(x)`: move every root the stack maps of the frames above name. */
RUNTIME_ABI __attribute__((noinline)) void gc_point(int64_t x) {
  walk_frames(__builtin_frame_address(0), move_roots, x);
}

/* `throw(thrown)`, called in the `tail` convention (through a shim where its first integer
 * is not the C convention's): resume at the first handler that takes it (`catch_tag`) of a
 * call site in the frames above, with the payload PAYLOAD_PER_TAG * its tag, or return if
 * none does. */
RUNTIME_ABI __attribute__((noinline)) void throw_from_tail(int64_t thrown) {
  walk_frames(__builtin_frame_address(0), catch_tag, thrown);
}

/* The line of a call that returned `value`. */
static void returned(int64_t value) {
  printf("R %lld W", (long long)value);
  for (int j = 0; j < WALKED_LEN; j++) printf(" %d", WALKED[j]);
  printf("\n");
  WALKED_LEN = 0;
}

/* The argument of `c`: its number, or the address of a word that holds WORD. */
static int64_t argument(const struct call *c) {
  WORD_OF_THE_CALL = WORD;
  return c->word ? (int64_t)(uintptr_t)&WORD_OF_THE_CALL : c->arg;
}

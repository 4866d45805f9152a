/* The runtime of tests/compiled_metadata.rs for aarch64 JIT images, under qemu: a
 * collector (`gc_point`) and an unwinder (`throw`) over the tables the test writes in
 * (BODIES, ROOTS, SITES), and the calls it asks for (CALLS), one line each on standard
 * output:
 *   F <signal> <pc in hex>    the call faulted (a forked call: the child's handler says)
 *   R <value> W <bodies...>   the call returned, and the bodies its last walk went through
 *   X <status>                a forked call's child ended otherwise
 * The test puts the loader (`load_image`) and the tables before this file. Frames are
 * Cranelift's and this file's own (built with frame pointers): the caller's frame pointer
 * at [fp], the return address into it at [fp + 8]; the stack pointer at a call is the
 * frame pointer less the distance its stack map or exception table gives. */
#include <signal.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

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

static void collect_from(uint64_t ra, uint64_t *fp) {
  WALKED_LEN = 0;
  for (int b; (b = body_of(ra)) >= 0; ra = fp[1], fp = (uint64_t *)fp[0]) {
    walked(b);
    for (int i = 0; i < (int)(sizeof ROOTS / sizeof ROOTS[0]); i++) {
      if (ROOTS[i].ret != ra) continue;
      int64_t *root = (int64_t *)((uint64_t)fp - ROOTS[i].span + ROOTS[i].offset);
      *root += MOVED_BY;
    }
  }
}

__attribute__((noinline)) void gc_point(int64_t x) {
  (void)x;
  uint64_t *frame = __builtin_frame_address(0);
  collect_from(frame[1], (uint64_t *)frame[0]);
}

/* Enter a handler as Cranelift expects it: the call site's stack and frame pointers, the
 * payload in x0 and x1. */
__attribute__((noreturn)) static void resume(uint64_t pc, uint64_t sp, uint64_t fp, int64_t payload) {
  register uint64_t x9 __asm__("x9") = pc;
  register uint64_t x10 __asm__("x10") = sp;
  register uint64_t x11 __asm__("x11") = fp;
  register int64_t x12 __asm__("x12") = payload;
  __asm__ volatile("mov sp, x10\n\tmov x29, x11\n\tmov x0, x12\n\tmov x1, xzr\n\tbr x9"
                   : : "r"(x9), "r"(x10), "r"(x11), "r"(x12) : "memory");
  __builtin_unreachable();
}

__attribute__((noinline)) void throw_from_tail(int64_t tag) {
  uint64_t *frame = __builtin_frame_address(0);
  uint64_t ra = frame[1];
  uint64_t *fp = (uint64_t *)frame[0];
  WALKED_LEN = 0;
  for (int b; (b = body_of(ra)) >= 0; ra = fp[1], fp = (uint64_t *)fp[0]) {
    walked(b);
    for (int i = 0; i < (int)(sizeof SITES / sizeof SITES[0]); i++) {
      if (SITES[i].ret != ra || (SITES[i].tag != tag && SITES[i].tag != -1)) continue;
      resume(SITES[i].handler, (uint64_t)fp - SITES[i].frame_offset, (uint64_t)fp, 100 * tag);
    }
  }
}

/* `throw(tag)` is called in the `tail` convention, whose first integer is x2, and keeps
 * the caller's frame pointer and return address for `throw_from_tail`'s frame record.
 * `call_tail(f, x)` calls a `tail` function of one integer, which it returns in x2. */
__asm__(".text\n"
        ".global throw_entry\n"
        ".type throw_entry, %function\n"
        "throw_entry:\n"
        "\tmov x0, x2\n"
        "\tb throw_from_tail\n"
        ".global call_tail\n"
        ".type call_tail, %function\n"
        "call_tail:\n"
        "\tstp x29, x30, [sp, #-16]!\n"
        "\tmov x29, sp\n"
        "\tmov x9, x0\n"
        "\tmov x2, x1\n"
        "\tblr x9\n"
        "\tmov x0, x2\n"
        "\tldp x29, x30, [sp], #16\n"
        "\tret\n");
void throw_entry(void);
int64_t call_tail(uint64_t f, int64_t x);

static void on_fault(int signal, siginfo_t *info, void *context) {
  (void)info;
  ucontext_t *uc = context;
  char line[64];
  int n = snprintf(line, sizeof line, "F %d %llx\n", signal, (unsigned long long)uc->uc_mcontext.pc);
  if (write(1, line, n) != n) _exit(2);
  _exit(0);
}

static int64_t invoke(const struct call *c) {
  int64_t x = c->word ? (int64_t)(uintptr_t)&WORD_OF_THE_CALL : c->arg;
  WORD_OF_THE_CALL = WORD;
  return c->tail ? call_tail(c->entry, x) : ((int64_t(*)(int64_t))(uintptr_t)c->entry)(x);
}

int main(void) {
  load_image();
  setvbuf(stdout, NULL, _IONBF, 0);
  for (int i = 0; i < (int)(sizeof CALLS / sizeof CALLS[0]); i++) {
    const struct call *c = &CALLS[i];
    if (!c->fork) {
      int64_t value = invoke(c);
      printf("R %lld W", (long long)value);
      for (int j = 0; j < WALKED_LEN; j++) printf(" %d", WALKED[j]);
      printf("\n");
      WALKED_LEN = 0;
      continue;
    }
    pid_t pid = fork();
    if (pid == 0) {
      struct sigaction action;
      memset(&action, 0, sizeof action);
      action.sa_sigaction = on_fault;
      action.sa_flags = SA_SIGINFO;
      int faults[] = {SIGILL, SIGSEGV, SIGBUS, SIGFPE, SIGTRAP};
      for (int j = 0; j < 5; j++) sigaction(faults[j], &action, NULL);
      alarm(20);
      printf("R %lld W\n", (long long)invoke(c));
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) printf("X %d\n", status);
  }
  return 0;
}

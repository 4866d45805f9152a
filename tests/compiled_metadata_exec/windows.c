/* The runtime's part for x86_64 Windows JIT images, under Wine (after `walk.c`): handlers
 * entered with rax and rdx for the payload, faults caught by a vectored exception handler
 * that sends the faulting call back to the loop of calls (`__builtin_longjmp`). The
 * fixtures' functions and the runtime's entries are in System V (or `tail`, which passes
 * one integer as System V does on x86_64). */

__attribute__((noreturn)) static void resume(uint64_t pc, uint64_t sp, uint64_t fp, int64_t payload) {
  __asm__ volatile("mov %%rsi, %%rsp\n\tmov %%rdi, %%rbp\n\txor %%edx, %%edx\n\tjmp *%%rcx"
                   : : "S"(sp), "D"(fp), "a"(payload), "c"(pc) : "memory");
  __builtin_unreachable();
}

/* What a vectored exception handler is given, as far as it reads: the record's code, and
 * the interrupted context's rsp and rip (CONTEXT's offsets on x64). */
struct exception_pointers {
  uint32_t *record;
  unsigned char *context;
};
#define CONTEXT_RSP 0x98
#define CONTEXT_RIP 0xf8
__declspec(dllimport) void *AddVectoredExceptionHandler(unsigned long, long (*)(struct exception_pointers *));

static void *BACK_TO_THE_LOOP[5];

static void back_to_the_loop(void) { __builtin_longjmp(BACK_TO_THE_LOOP, 1); }

static long on_fault(struct exception_pointers *e) {
  uint64_t rip, rsp;
  memcpy(&rip, e->context + CONTEXT_RIP, 8);
  memcpy(&rsp, e->context + CONTEXT_RSP, 8);
  printf("F %d %llx\n", (int)e->record[0], (unsigned long long)rip);
  /* Continue in `back_to_the_loop`, on a stack aligned as at a function's entry. */
  rip = (uint64_t)(uintptr_t)back_to_the_loop;
  rsp = (rsp & ~(uint64_t)15) - 8;
  memcpy(e->context + CONTEXT_RIP, &rip, 8);
  memcpy(e->context + CONTEXT_RSP, &rsp, 8);
  return -1; /* EXCEPTION_CONTINUE_EXECUTION */
}

typedef int64_t __attribute__((sysv_abi)) (*entry)(int64_t);

static int64_t invoke(const struct call *c) { return ((entry)(uintptr_t)c->entry)(argument(c)); }

int main(void) {
  load_image();
  setvbuf(stdout, NULL, _IONBF, 0);
  AddVectoredExceptionHandler(1, on_fault);
  /* Static, so that a call that faulted and came back by `__builtin_longjmp` finds it. */
  static volatile int i;
  for (i = 0; i < (int)(sizeof CALLS / sizeof CALLS[0]); i++) {
    const struct call *c = &CALLS[i];
    if (__builtin_setjmp(BACK_TO_THE_LOOP) != 0) continue; /* it faulted: said so */
    returned(invoke(c));
  }
  return 0;
}

// goro/chan.h: channels (Go's chan T) and Select.
//
// A Chan<T> is a handle: copies refer to the same channel, which lives until
// the last handle is gone and no goroutine or thread waits on it (a Send, Recv
// or Select parked on a channel keeps it, as the waiter's stack does in Go;
// the last handle may go while one waits). Semantics are Go's:
//   - capacity 0 is unbuffered: a send completes when a receiver takes it;
//   - Recv on a closed channel returns the buffered values, then nullopt;
//   - Send on a closed channel, Close of a closed channel and Close of a nil
//     channel are fatal errors naming the goroutine;
//   - Send and Recv on a nil channel (Chan<T>(nullptr)) block forever.
// Channels may be used from goroutines and from plain threads alike.
//
// A channel moves its elements and never copies them. It moves them with its
// lock held, where an exception could not be recovered from: a move that
// throws (std::deque's may, when memory runs out) is a fatal error, reported
// as an uncaught exception naming the goroutine. Send a std::unique_ptr<T>
// if that matters. Under the lock it also destroys the moved-from elements
// of its buffer, and nothing else of its users': a value a receive replaces
// (OnRecv's target) is destroyed by the receiving goroutine or thread, with
// no channel lock held.
#ifndef GORO_CHAN_H_
#define GORO_CHAN_H_

#include <cstddef>
#include <iterator>
#include <memory>
#include <new>
#include <optional>
#include <type_traits>
#include <utility>

namespace goro {

namespace internal {

// How the type-erased channel core moves elements of one type. The core calls
// them with the channel's lock held, so they are noexcept: a T whose move
// throws ends the program there (std::terminate, reported as an uncaught
// exception) rather than leave the lock held and a waiter asleep. Under a
// lock, to_opt and reset_opt only ever see an empty optional (Recv's own);
// Select assigns a receive case's target, which may hold a value, with them
// after it has released every lock.
struct ElemOps {
  void (*to_raw)(void* raw, void* src);  // move-construct a T at raw from *src
  void (*to_opt)(void* opt, void* src);  // emplace *src into a std::optional<T>
  void (*reset_opt)(void* opt);          // reset a std::optional<T>: closed, no value
  void (*destroy)(void* raw);            // destroy the T at raw
  size_t size;
  size_t align;
};

template <typename T>
inline constexpr ElemOps kElemOps = {
    [](void* raw, void* src) noexcept { ::new (raw) T(std::move(*static_cast<T*>(src))); },
    [](void* opt, void* src) noexcept {
      static_cast<std::optional<T>*>(opt)->emplace(std::move(*static_cast<T*>(src)));
    },
    [](void* opt) noexcept { static_cast<std::optional<T>*>(opt)->reset(); },
    [](void* raw) noexcept { static_cast<T*>(raw)->~T(); },
    sizeof(T),
    alignof(T),
};

class ChanCore;  // core/chan.cc
// A channel is reference-counted: every Chan handle holds a reference, and
// so does every goroutine or thread blocked on it in Select. The last
// reference frees it, unless a goroutine or thread is blocked on it in Send
// or Recv: that one can never be woken, and keeps the channel, as a
// goroutine's stack keeps a channel alive in Go.
ChanCore* NewChanCore(size_t cap, const ElemOps* ops);  // with one reference
void ChanRef(ChanCore* c);                              // takes another
void ChanUnref(ChanCore* c);                            // drops one
// `elem` points to a T that is moved from once the send happens.
void ChanSend(ChanCore* c, void* elem);
// `out` points to an empty std::optional<T>; it stays empty if the channel is
// closed and drained.
void ChanRecv(ChanCore* c, void* out);
void ChanClose(ChanCore* c);
size_t ChanLen(const ChanCore* c);
size_t ChanCap(const ChanCore* c);

enum class CaseDir { kSend, kRecv, kDefault };
struct SelectCaseRep {
  ChanCore* chan;  // nullptr: a nil channel, never ready
  CaseDir dir;
  void* elem;      // kSend: T*; kRecv: std::optional<T>*
};
// Returns the index of the case that proceeded.
int SelectImpl(SelectCaseRep* cases, int n);

}  // namespace internal

template <typename T>
class Chan {
  static_assert(std::is_move_constructible_v<T>, "channel elements must be movable");

 public:
  // A channel with room for `cap` buffered values; 0 makes it unbuffered.
  explicit Chan(size_t cap = 0) : core_(internal::NewChanCore(cap, &internal::kElemOps<T>)) {}
  // The nil channel: Send and Recv block forever, Close is a fatal error.
  // Takes std::nullptr_t exactly (a template, so that a literal 0, also a
  // null pointer constant, is a capacity and Chan<T>(0) is not ambiguous).
  template <typename N>
    requires std::is_null_pointer_v<N>
  explicit Chan(N) {}

  Chan(const Chan& o) : core_(o.core_) {
    if (core_ != nullptr) internal::ChanRef(core_);
  }
  // Leaves `o` nil.
  Chan(Chan&& o) noexcept : core_(std::exchange(o.core_, nullptr)) {}
  Chan& operator=(Chan o) noexcept {
    std::swap(core_, o.core_);
    return *this;
  }
  ~Chan() {
    if (core_ != nullptr) internal::ChanUnref(core_);
  }

  // Blocks until a receiver takes `v` or there is room in the buffer.
  void Send(T v) { internal::ChanSend(core_, &v); }
  // Blocks until a value is available; nullopt once the channel is closed and
  // every buffered value has been received.
  std::optional<T> Recv() {
    std::optional<T> out;
    internal::ChanRecv(core_, &out);
    return out;
  }
  // No more sends; waiting receivers get nullopt after the buffer drains.
  void Close() { internal::ChanClose(core_); }

  // The number of buffered values, like Go's len(ch): a snapshot, which may
  // be out of date by the time it returns if others send or receive.
  size_t size() const { return core_ != nullptr ? internal::ChanLen(core_) : 0; }
  size_t capacity() const { return core_ != nullptr ? internal::ChanCap(core_) : 0; }
  bool is_nil() const { return core_ == nullptr; }
  internal::ChanCore* core() const { return core_; }

  // Range-style iteration, like Go's `for v := range ch`: receives until the
  // channel is closed and drained. The iterator is a std::input_iterator (so
  // `std::vector<T> v(ch.begin(), ch.end())` works): single pass, each ++
  // receives, and every copy of an iterator receives from the one channel.
  class iterator {
   public:
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using reference = T&;
    using pointer = T*;
    using iterator_category = std::input_iterator_tag;

    // What it++ returns: the value `it` held before the ++ (moved out of it),
    // so that `*it++` works as for any input iterator.
    class postfix_result {
     public:
      T& operator*() { return *value_; }

     private:
      friend class iterator;
      explicit postfix_result(std::optional<T> v) : value_(std::move(v)) {}
      std::optional<T> value_;
    };

    iterator() = default;
    explicit iterator(Chan* c) : chan_(c) { ++*this; }
    iterator(const iterator&) = default;  // deleted unless T is copyable
    iterator(iterator&&) = default;
    // The assignments construct the value in place: T need not be assignable.
    iterator& operator=(const iterator& o)
      requires std::is_copy_constructible_v<T>
    {
      if (this != &o) Assign(o.chan_, o.value_);
      return *this;
    }
    iterator& operator=(iterator&& o) noexcept {
      if (this != &o) Assign(o.chan_, std::move(o.value_));
      return *this;
    }

    // The value last received. A const iterator gives it too (input
    // iterators are read through a const one), as a const pointer would.
    T& operator*() const { return *value_; }
    T* operator->() const { return &*value_; }
    iterator& operator++() {
      value_.reset();  // received in place: T need not be assignable
      internal::ChanRecv(chan_->core(), &value_);
      if (!value_) chan_ = nullptr;
      return *this;
    }
    postfix_result operator++(int) {
      postfix_result old(std::move(value_));
      ++*this;
      return old;
    }
    bool operator==(const iterator& o) const { return chan_ == o.chan_; }

   private:
    template <typename Opt>
    void Assign(Chan* c, Opt&& v) {
      chan_ = c;
      value_.reset();
      if (v) value_.emplace(*std::forward<Opt>(v));
    }

    Chan* chan_ = nullptr;  // nullptr: the end (the channel closed and drained)
    mutable std::optional<T> value_;
  };
  iterator begin() { return iterator(this); }
  iterator end() { return iterator(); }

  friend bool operator==(const Chan& a, const Chan& b) { return a.core_ == b.core_; }

 private:
  internal::ChanCore* core_ = nullptr;  // one reference, or nullptr: the nil channel
};

// A case of Select: make one with OnSend, OnRecv or OnDefault. A case made
// from a named channel refers to it (its owner keeps it alive); one made
// from a temporary - OnRecv(After(d), &t), Go's `case <-time.After(d)` -
// holds a reference of its own, so that it may also be kept and used later.
class SelectCase {
 public:
  explicit SelectCase(internal::SelectCaseRep rep, internal::ChanCore* owned = nullptr) : rep(rep), owned_(owned) {
    if (owned_ != nullptr) internal::ChanRef(owned_);
  }
  SelectCase(const SelectCase& o) : SelectCase(o.rep, o.owned_) {}
  SelectCase(SelectCase&& o) noexcept : rep(o.rep), owned_(std::exchange(o.owned_, nullptr)) {}
  SelectCase& operator=(SelectCase o) noexcept {
    rep = o.rep;
    std::swap(owned_, o.owned_);
    return *this;
  }
  ~SelectCase() {
    if (owned_ != nullptr) internal::ChanUnref(owned_);
  }

  internal::SelectCaseRep rep;

 private:
  internal::ChanCore* owned_;  // a temporary channel's reference, or nullptr
};

// Sends `*v` on `c` if this case is chosen (then *v is moved from).
template <typename T>
SelectCase OnSend(Chan<T>& c, T* v) {
  return SelectCase({c.core(), internal::CaseDir::kSend, v});
}
template <typename T>
SelectCase OnSend(Chan<T>&& c, T* v) {
  return SelectCase({c.core(), internal::CaseDir::kSend, v}, c.core());
}
// Receives into `*out` if this case is chosen: a value, or nullopt if `c` is
// closed and drained. If another case is chosen, `*out` is left alone.
// `*out` may hold a value, as in Go's `case cur = <-c:`. The case receives
// into storage of the Select's (the value moves there under the channel's
// lock), and the goroutine or thread that called Select assigns `*out` after
// it has released every channel lock, just before Select returns; so the old
// value is destroyed there, never under a channel lock nor on the thread of
// the sender or closer that completed the case. Its destructor may use
// channels, this one included, may drop the last handle to a channel of
// the same Select, and may block.
template <typename T>
SelectCase OnRecv(Chan<T>& c, std::optional<T>* out) {
  return SelectCase({c.core(), internal::CaseDir::kRecv, out});
}
template <typename T>
SelectCase OnRecv(Chan<T>&& c, std::optional<T>* out) {
  return SelectCase({c.core(), internal::CaseDir::kRecv, out}, c.core());
}
// Chosen when no other case can proceed at once; makes Select non-blocking.
inline SelectCase OnDefault() { return SelectCase({nullptr, internal::CaseDir::kDefault, nullptr}); }

// Go's select: blocks until one case can proceed, chooses uniformly at random
// among the cases that can, performs it and returns its index (0-based, in
// argument order). With an OnDefault case it never blocks; more than one
// OnDefault is a fatal error naming the goroutine (Go's compiler rejects it).
// A Select with no cases, or only nil channels and no default, blocks
// forever. More than 1024 cases is a fatal error (Go allows 65536).
template <typename... Cases>
int Select(const Cases&... cases) {
  internal::SelectCaseRep reps[] = {cases.rep..., {nullptr, internal::CaseDir::kDefault, nullptr}};
  return internal::SelectImpl(reps, static_cast<int>(sizeof...(Cases)));
}

}  // namespace goro

#endif  // GORO_CHAN_H_

(* Finite enumerations of token sequences and the closed-form counts
   (spec/rules.md: cubic's count C(k-1,c)|G|^c, exact's Lemma E1,
   subcubic_gap's (m-g+1)^c).  Only the standard library. *)
From Coq Require Import List Arith Bool Lia Permutation.
Import ListNotations.

(* ---- generic list facts ---- *)

Lemma NoDup_app' : forall (A : Type) (l1 l2 : list A),
  NoDup l1 -> NoDup l2 -> (forall x, In x l1 -> ~ In x l2) -> NoDup (l1 ++ l2).
Proof.
  intros A l1; induction l1 as [|a l1 IH]; simpl; intros l2 H1 H2 H; [assumption|].
  inversion H1; subst. constructor.
  - rewrite in_app_iff. intros [H'|H']; [contradiction|]. exact (H a (or_introl eq_refl) H').
  - apply IH; [assumption|assumption|]. intros x Hx; apply H; right; assumption.
Qed.

Lemma NoDup_map_cons : forall (u : nat) (X : list (list nat)), NoDup X -> NoDup (map (cons u) X).
Proof.
  intros u X; induction X as [|x X IH]; simpl; intros H; constructor.
  - rewrite in_map_iff. intros [y [Hy Hin]]. injection Hy as ->. inversion H; contradiction.
  - apply IH. inversion H; assumption.
Qed.

Lemma filter_ext_in' : forall (A : Type) (f g : A -> bool) (L : list A),
  (forall x, In x L -> f x = g x) -> filter f L = filter g L.
Proof.
  intros A f g L; induction L as [|x L IH]; simpl; intros H; [reflexivity|].
  rewrite (H x (or_introl eq_refl)), IH by (intros; apply H; right; assumption). reflexivity.
Qed.

Lemma length_filter_cons : forall (A : Type) (f : A -> bool) x L,
  length (filter f (x :: L)) = (if f x then 1 else 0) + length (filter f L).
Proof. intros; simpl; destruct (f x); reflexivity. Qed.

(* |{x : P x}| = |{x : P x /\ Q x}| + |{x : P x /\ ~ Q x}| *)
Lemma length_filter_split : forall (A : Type) (P Q : A -> bool) (L : list A),
  length (filter P L)
  = length (filter (fun x => P x && Q x) L) + length (filter (fun x => P x && negb (Q x)) L).
Proof.
  intros A P Q L; induction L as [|x L IH]; [reflexivity|].
  rewrite !length_filter_cons, IH. destruct (P x), (Q x); simpl; lia.
Qed.

(* Two duplicate-free lists with the same members have the same length. *)
Lemma filter_count : forall (A : Type) (P : A -> bool) (L X : list A),
  NoDup L -> NoDup X -> (forall x, In x X <-> In x L /\ P x = true) ->
  length (filter P L) = length X.
Proof.
  intros A P L X HL HX H. apply Permutation_length, NoDup_Permutation.
  - apply NoDup_filter; assumption.
  - assumption.
  - intros x. rewrite filter_In, H. tauto.
Qed.

Lemma list_sum_map_zero : forall (A : Type) (l : list A), list_sum (map (fun _ => 0) l) = 0.
Proof. intros A l; induction l; simpl; auto. Qed.

Lemma list_sum_map_plus : forall (A : Type) (f g : A -> nat) l,
  list_sum (map (fun x => f x + g x) l) = list_sum (map f l) + list_sum (map g l).
Proof. intros A f g l; induction l; simpl; [reflexivity|]. rewrite IHl; lia. Qed.

Lemma list_sum_indicator_out : forall k Ks, ~ In k Ks ->
  list_sum (map (fun c => if k =? c then 1 else 0) Ks) = 0.
Proof.
  intros k Ks; induction Ks as [|a Ks IH]; simpl; intros H; [reflexivity|].
  destruct (Nat.eqb_spec k a); [exfalso; apply H; left; auto|].
  rewrite IH by tauto. reflexivity.
Qed.

Lemma list_sum_indicator_in : forall k Ks, NoDup Ks -> In k Ks ->
  list_sum (map (fun c => if k =? c then 1 else 0) Ks) = 1.
Proof.
  intros k Ks; induction Ks as [|a Ks IH]; simpl; intros Hn H; [contradiction|].
  inversion Hn; subst. destruct (Nat.eqb_spec k a) as [->|Hne].
  - rewrite list_sum_indicator_out by assumption. reflexivity.
  - destruct H as [H|H]; [congruence|]. rewrite IH by assumption. reflexivity.
Qed.

(** Counting by a key: when every counted element's key lies in the
    duplicate-free list Ks, the count is the sum of the per-key counts. *)
Theorem count_partition : forall (A : Type) (key : A -> nat) (Ks : list nat) (P : A -> bool) L,
  NoDup Ks -> (forall x, In x L -> P x = true -> In (key x) Ks) ->
  length (filter P L)
  = list_sum (map (fun c => length (filter (fun x => (key x =? c) && P x) L)) Ks).
Proof.
  intros A key Ks P L HK; induction L as [|x L IH]; intros H.
  - simpl. rewrite list_sum_map_zero. reflexivity.
  - rewrite length_filter_cons.
    rewrite (map_ext (fun c => length (filter (fun x0 => (key x0 =? c) && P x0) (x :: L)))
                     (fun c => (if (key x =? c) && P x then 1 else 0)
                               + length (filter (fun x0 => (key x0 =? c) && P x0) L)))
      by (intros; apply length_filter_cons).
    rewrite list_sum_map_plus, <- IH by (intros; apply H; [right|]; assumption).
    f_equal. destruct (P x) eqn:HP.
    + rewrite (map_ext _ (fun c => if key x =? c then 1 else 0))
        by (intros; rewrite andb_true_r; reflexivity).
      rewrite list_sum_indicator_in; auto. apply H; [left|]; auto.
    + rewrite (map_ext _ (fun _ => 0)) by (intros; rewrite andb_false_r; reflexivity).
      rewrite list_sum_map_zero. reflexivity.
Qed.

(* ---- all sequences ---- *)

(* l ++ ... with a head token from G, for every tail in X *)
Definition prefix_all (G : list nat) (X : list (list nat)) : list (list nat) :=
  flat_map (fun u => map (cons u) X) G.

Lemma length_prefix_all : forall G X, length (prefix_all G X) = length G * length X.
Proof.
  intros G X; induction G as [|a G IH]; [reflexivity|].
  unfold prefix_all in *; simpl. rewrite app_length, map_length, IH. reflexivity.
Qed.

Lemma In_prefix_all : forall G X l,
  In l (prefix_all G X) <-> exists u r, l = u :: r /\ In u G /\ In r X.
Proof.
  intros G X l; unfold prefix_all; rewrite in_flat_map; split.
  - intros [u [Hu Hl]]. apply in_map_iff in Hl. destruct Hl as [r [<- Hr]]. eauto.
  - intros [u [r [-> [Hu Hr]]]]. exists u; split; [assumption|]. apply in_map; assumption.
Qed.

Lemma NoDup_prefix_all : forall G X, NoDup G -> NoDup X -> NoDup (prefix_all G X).
Proof.
  intros G X HG HX; induction G as [|a G IH]; [constructor|].
  inversion HG; subst. unfold prefix_all; simpl. apply NoDup_app'.
  - apply NoDup_map_cons; assumption.
  - apply IH; assumption.
  - intros x Hx Hx'. apply in_map_iff in Hx. destruct Hx as [r [<- _]].
    apply (In_prefix_all G X) in Hx'. destruct Hx' as [u [r' [Heq [Hu _]]]].
    injection Heq as <- _. contradiction.
Qed.

(* All sequences of length n over the tokens 0..v-1. *)
Fixpoint seqs (v n : nat) : list (list nat) :=
  match n with
  | O => [[]]
  | S n' => prefix_all (seq 0 v) (seqs v n')
  end.

Lemma length_seqs : forall v n, length (seqs v n) = v ^ n.
Proof.
  intros v n; induction n; simpl; [reflexivity|].
  rewrite length_prefix_all, seq_length, IHn. reflexivity.
Qed.

Lemma NoDup_seqs : forall v n, NoDup (seqs v n).
Proof.
  intros v n; induction n; simpl.
  - constructor; [intros []|constructor].
  - apply NoDup_prefix_all; [apply seq_NoDup | assumption].
Qed.

Lemma In_seqs : forall v n l,
  In l (seqs v n) <-> length l = n /\ Forall (fun t => t < v) l.
Proof.
  intros v n; induction n as [|n IH]; intros l; simpl.
  - split.
    + intros [<-|[]]. split; auto.
    + intros [Hl _]. destruct l; [left; reflexivity | discriminate].
  - rewrite In_prefix_all. split.
    + intros [u [r [-> [Hu Hr]]]]. apply in_seq in Hu. apply IH in Hr. destruct Hr.
      split; simpl; [auto | constructor; [lia | assumption]].
    + intros [Hl HF]. destruct l as [|u r]; [discriminate|].
      inversion HF; subst. exists u, r. split; [reflexivity|]. split.
      * apply in_seq; lia.
      * apply IH; split; [simpl in Hl; lia | assumption].
Qed.

(* ---- binomial coefficients and the class fillings ---- *)

Fixpoint choose (n c : nat) : nat :=
  match n, c with
  | _, O => 1
  | O, S _ => 0
  | S n', S c' => choose n' c' + choose n' c
  end.

Lemma choose_0 : forall n, choose n 0 = 1.
Proof. destruct n; reflexivity. Qed.

(* number of entries different from m *)
Definition nonm (m : nat) (l : list nat) : nat := length (filter (fun t => negb (t =? m)) l).

(* fill m G n c: the sequences of length n with exactly c entries taken from G
   and m at the other n - c entries. *)
Fixpoint fill (m : nat) (G : list nat) (n c : nat) : list (list nat) :=
  match n with
  | O => match c with O => [[]] | S _ => [] end
  | S n' => map (cons m) (fill m G n' c)
            ++ match c with O => [] | S c' => prefix_all G (fill m G n' c') end
  end.

(** The closed form: C(n, c) * |G|^c. *)
Theorem length_fill : forall m G n c, length (fill m G n c) = choose n c * length G ^ c.
Proof.
  intros m G n; induction n as [|n IH]; intros c.
  - destruct c; reflexivity.
  - simpl. rewrite app_length, map_length, IH. destruct c as [|c].
    + simpl. rewrite choose_0. lia.
    + rewrite length_prefix_all, IH. simpl. ring.
Qed.

Theorem In_fill : forall m G n c l, ~ In m G ->
  (In l (fill m G n c)
   <-> length l = n /\ Forall (fun t => t = m \/ In t G) l /\ nonm m l = c).
Proof.
  intros m G n; induction n as [|n IH]; intros c l HmG.
  - destruct c; simpl; split.
    + intros [<-|[]]. repeat split; auto.
    + intros [Hl _]. destruct l; [left; reflexivity | discriminate].
    + intros [].
    + intros [Hl [_ Hc]]. destruct l; [discriminate | discriminate].
  - simpl fill. rewrite in_app_iff, in_map_iff. split.
    + intros [[r [<- Hr]]|Hr].
      * apply IH in Hr; [|assumption]. destruct Hr as [Hl [HF Hc]].
        repeat split; simpl; auto. unfold nonm in *; simpl. rewrite Nat.eqb_refl. exact Hc.
      * destruct c as [|c]; [destruct Hr|].
        apply In_prefix_all in Hr. destruct Hr as [u [r [-> [Hu Hr]]]].
        apply IH in Hr; [|assumption]. destruct Hr as [Hl [HF Hc]].
        assert (u <> m) by (intros ->; contradiction).
        repeat split; simpl; auto. unfold nonm in *; simpl.
        destruct (Nat.eqb_spec u m); [contradiction|]. simpl. rewrite Hc. reflexivity.
    + intros [Hl [HF Hc]]. destruct l as [|u r]; [discriminate|].
      rewrite Forall_cons_iff in HF. destruct HF as [Hu Hr]. simpl in Hl. unfold nonm in Hc; simpl in Hc.
      destruct (Nat.eqb_spec u m) as [->|Hne].
      * left. exists r. split; [reflexivity|]. apply IH; [assumption|]. split; [lia|].
        split; [assumption|]. rewrite ?Nat.eqb_refl in Hc. simpl in Hc. exact Hc.
      * right. destruct Hu as [|Hu]; [contradiction|]. simpl in Hc.
        destruct c as [|c]; [discriminate|]. apply In_prefix_all.
        exists u, r. split; [reflexivity|]. split; [assumption|].
        apply IH; [assumption|]. split; [lia|]. split; [assumption|].
        injection Hc; auto.
Qed.

Theorem NoDup_fill : forall m G n c, NoDup G -> ~ In m G -> NoDup (fill m G n c).
Proof.
  intros m G n; induction n as [|n IH]; intros c HG HmG.
  - destruct c; simpl; constructor; [intros []|constructor].
  - simpl. apply NoDup_app'.
    + apply NoDup_map_cons, IH; assumption.
    + destruct c; [constructor|]. apply NoDup_prefix_all; auto.
    + intros x Hx Hx'. apply in_map_iff in Hx. destruct Hx as [r [<- _]].
      destruct c; [destruct Hx'|].
      apply In_prefix_all in Hx'. destruct Hx' as [u [r' [Heq [Hu _]]]].
      injection Heq as <- _. contradiction.
Qed.

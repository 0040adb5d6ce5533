(* Rule family_gap's counting lemmas (spec/rules.md §Rule family_gap: Lemmas G1, G2, G4;
   §Rule family_gap: merged classes: Lemma G5 (a)-(e)).

   Representation (as Classes.v): a sequence is t = q :: l, q the query token (position
   k-1) and l = [t_0; ...; t_{k-2}] the n = k-1 non-query tokens in order; all sequences
   are seqs v (S n).  A class gives each non-query position a *kind*:
     0  the gap alphabet A = {0, ..., m-g}        (u + g <= m)
     1  the maximum alone {m}
     2  A with m added, A ∪ {m}                    (merged classes, after their first m)
   The class C(q, m, S, g) has kind 1 on S and 0 elsewhere (S is its indicator s : list
   bool, s_i = true iff i ∈ S); the merged class M(q, m, i0, g) has kind 0 before i0,
   1 at i0 and 2 after.  Membership (`member`) is the checker's test (family_gap.py
   `in_class`): the query is q and each non-query token fits its position's kind. *)
From Coq Require Import List Arith Bool Lia.
From MaxK Require Import Counting Classes.
Import ListNotations.

Definition tok (m g k u : nat) : bool :=
  match k with
  | 0 => u + g <=? m
  | 1 => u =? m
  | _ => (u =? m) || (u + g <=? m)
  end.

Fixpoint fits (m g : nat) (ks : list nat) (l : list nat) : bool :=
  match ks, l with
  | [], [] => true
  | k :: ks', u :: l' => tok m g k u && fits m g ks' l'
  | _, _ => false
  end.

Definition member (q m g : nat) (ks : list nat) (t : list nat) : bool :=
  match t with
  | [] => false
  | q' :: l => (q' =? q) && fits m g ks l
  end.

(* the kinds of C(q, m, S, g) and of M(q, m, i0, g) with j positions after i0 *)
Definition gap_kinds (s : list bool) : list nat := map (fun b : bool => if b then 1 else 0) s.
Definition merged_kinds (i0 j : nat) : list nat := repeat 0 i0 ++ 1 :: repeat 2 j.

(* the signature's parts: which non-query positions hold m, and the first of them *)
Definition mask (m : nat) (l : list nat) : list bool := map (fun u => u =? m) l.

Fixpoint first_m (m : nat) (l : list nat) : option nat :=
  match l with
  | [] => None
  | u :: l' => if u =? m then Some 0 else option_map S (first_m m l')
  end.

Fixpoint first_true (s : list bool) : option nat :=
  match s with
  | [] => None
  | b :: s' => if b then Some 0 else option_map S (first_true s')
  end.

Definition nfree (s : list bool) : nat := length (filter negb s).

(* ---- fits, position by position ---- *)

Lemma fits_nth : forall m g ks l,
  fits m g ks l = true <->
  length l = length ks /\ forall i, i < length ks -> tok m g (nth i ks 0) (nth i l 0) = true.
Proof.
  intros m g ks; induction ks as [|k ks IH]; intros [|u l]; simpl.
  - split; [intros _; split; [reflexivity | intros; lia] | reflexivity].
  - split; [discriminate | intros [H _]; discriminate].
  - split; [discriminate | intros [H _]; discriminate].
  - rewrite andb_true_iff, IH. split.
    + intros [Hu [Hl Hi]]. split; [lia|]. intros [|i] Hlt; [assumption|]. apply Hi; lia.
    + intros [Hl Hi]. split; [apply (Hi 0); lia|]. split; [lia|].
      intros i Hlt. apply (Hi (S i)); lia.
Qed.

Lemma tok_le : forall m g k u, 1 <= g -> tok m g k u = true -> u <= m.
Proof.
  intros m g [|[|k]] u Hg; simpl; intros H.
  - apply Nat.leb_le in H; lia.
  - apply Nat.eqb_eq in H; lia.
  - apply orb_true_iff in H; destruct H as [H|H];
      [apply Nat.eqb_eq in H | apply Nat.leb_le in H]; lia.
Qed.

Lemma fits_le : forall m g ks l, 1 <= g -> fits m g ks l = true -> Forall (fun u => u <= m) l.
Proof.
  intros m g ks; induction ks as [|k ks IH]; intros [|u l] Hg H; simpl in H;
    try discriminate; constructor.
  - apply andb_true_iff in H. apply (tok_le m g k u Hg), H.
  - apply andb_true_iff in H. apply (IH l Hg), H.
Qed.

Lemma max_is : forall m q l, q <= m -> Forall (fun u => u <= m) l -> In m (q :: l) ->
  list_max (q :: l) = m.
Proof.
  intros m q l Hq Hl Hin. apply Nat.le_antisymm.
  - apply list_max_le. constructor; assumption.
  - apply list_max_ge; assumption.
Qed.

(* ---- product sets and the sizes ---- *)

Fixpoint prod (pat : list (list nat)) : list (list nat) :=
  match pat with
  | [] => [[]]
  | G :: pat' => prefix_all G (prod pat')
  end.

Lemma In_prod : forall pat l,
  In l (prod pat) <-> length l = length pat /\
                      forall i, i < length pat -> In (nth i l 0) (nth i pat []).
Proof.
  induction pat as [|G pat IH]; intros l; simpl.
  - split.
    + intros [<-|[]]. split; [reflexivity | intros; lia].
    + intros [Hl _]. destruct l; [left; reflexivity | discriminate].
  - rewrite In_prefix_all. split.
    + intros [u [r [-> [Hu Hr]]]]. apply IH in Hr. destruct Hr as [Hl Hi].
      split; [simpl; lia|]. intros [|i] Hlt; [assumption|]. apply Hi; lia.
    + intros [Hl Hi]. destruct l as [|u r]; [discriminate|]. exists u, r.
      split; [reflexivity|]. split; [apply (Hi 0); lia|].
      apply IH. split; [simpl in Hl; lia|]. intros i Hlt. apply (Hi (S i)); lia.
Qed.

Lemma NoDup_prod : forall pat, Forall (@NoDup nat) pat -> NoDup (prod pat).
Proof.
  induction pat as [|G pat IH]; intros H; simpl.
  - constructor; [intros []|constructor].
  - inversion H; subst. apply NoDup_prefix_all; [assumption | apply IH; assumption].
Qed.

Lemma length_prod : forall pat,
  length (prod pat) = fold_right (fun G acc => length G * acc) 1 pat.
Proof.
  induction pat as [|G pat IH]; simpl; [reflexivity|]. rewrite length_prefix_all, IH.
  reflexivity.
Qed.

Definition alph (m g k : nat) : list nat :=
  match k with
  | 0 => seq 0 (m + 1 - g)
  | 1 => [m]
  | _ => seq 0 (m + 1 - g) ++ [m]
  end.

Lemma In_alph : forall m g k u, 1 <= g -> In u (alph m g k) <-> tok m g k u = true.
Proof.
  intros m g [|[|k]] u Hg; simpl.
  - rewrite in_seq, Nat.leb_le. lia.
  - rewrite Nat.eqb_eq. split; [intros [H|[]]; lia | intros ->; left; reflexivity].
  - rewrite in_app_iff, in_seq, orb_true_iff, Nat.eqb_eq, Nat.leb_le. simpl. lia.
Qed.

Lemma NoDup_alph : forall m g k, 1 <= g -> NoDup (alph m g k).
Proof.
  intros m g [|[|k]] Hg; simpl.
  - apply seq_NoDup.
  - constructor; [intros []|constructor].
  - apply NoDup_app'; [apply seq_NoDup | constructor; [intros []|constructor] |].
    intros x Hx [<-|[]]. apply in_seq in Hx. lia.
Qed.

Lemma fits_prod : forall m g ks l, 1 <= g ->
  fits m g ks l = true <-> In l (prod (map (alph m g) ks)).
Proof.
  intros m g ks l Hg. rewrite fits_nth, In_prod, map_length. split.
  - intros [Hl Hi]. split; [assumption|]. intros i Hlt.
    rewrite (nth_indep _ [] (alph m g 0)) by (rewrite map_length; assumption).
    rewrite map_nth. apply In_alph; [assumption | apply Hi; assumption].
  - intros [Hl Hi]. split; [assumption|]. intros i Hlt. apply In_alph; [assumption|].
    assert (H := Hi i Hlt).
    rewrite (nth_indep _ [] (alph m g 0)) in H by (rewrite map_length; assumption).
    rewrite map_nth in H. exact H.
Qed.

(* Every class is a product: its members among all sequences number the product of its
   positions' alphabet sizes. *)
Theorem member_count : forall v q m g ks, 1 <= g -> q < v -> m < v ->
  length (filter (member q m g ks) (seqs v (S (length ks))))
  = fold_right (fun k acc => length (alph m g k) * acc) 1 ks.
Proof.
  intros v q m g ks Hg Hq Hm.
  transitivity (length (map (cons q) (prod (map (alph m g) ks)))).
  - apply filter_count.
    + apply NoDup_seqs.
    + apply NoDup_map_cons, NoDup_prod. rewrite Forall_forall. intros G HG.
      apply in_map_iff in HG. destruct HG as [k [<- _]]. apply NoDup_alph; assumption.
    + intros t. rewrite in_map_iff. split.
      * intros [l [<- Hl]]. apply fits_prod in Hl; [|assumption]. split.
        -- apply In_seqs. split; [simpl; f_equal; apply fits_nth in Hl; apply Hl|].
           constructor; [assumption|]. apply fits_le in Hl; [|assumption].
           eapply Forall_impl; [|exact Hl]. simpl; intros; lia.
        -- simpl. rewrite Nat.eqb_refl, Hl. reflexivity.
      * intros [_ Ht]. destruct t as [|q' l]; [discriminate|]. simpl in Ht.
        apply andb_true_iff in Ht. destruct Ht as [Hq' Hl]. apply Nat.eqb_eq in Hq'.
        subst q'. exists l. split; [reflexivity|]. apply fits_prod; assumption.
  - rewrite map_length, length_prod. clear. induction ks as [|k ks IH]; simpl;
      [reflexivity | rewrite IH; reflexivity].
Qed.

(* ---- Lemma G1 (signature) ---- *)

Lemma gap_kinds_length : forall s, length (gap_kinds s) = length s.
Proof. intros; apply map_length. Qed.

Lemma nth_gap_kinds : forall s i, i < length s -> nth i (gap_kinds s) 0 = if nth i s false then 1 else 0.
Proof.
  intros s i _. unfold gap_kinds. exact (map_nth (fun b : bool => if b then 1 else 0) s false i).
Qed.

Lemma nth_mask : forall m l i, i < length l -> nth i (mask m l) false = (nth i l 0 =? m).
Proof.
  intros m l i Hi. unfold mask.
  transitivity (nth i (map (fun u => u =? m) l) ((fun u => u =? m) 0));
    [apply nth_indep; rewrite map_length; assumption | exact (map_nth (fun u => u =? m) l 0 i)].
Qed.

Lemma list_eq_nth : forall (A : Type) (d : A) (a b : list A), length a = length b ->
  (forall i, i < length a -> nth i a d = nth i b d) -> a = b.
Proof.
  intros A d a; induction a as [|x a IH]; intros [|y b] Hl H; try discriminate; [reflexivity|].
  simpl in Hl. f_equal; [apply (H 0); simpl; lia|]. apply IH; [lia|].
  intros i Hi. apply (H (S i)); simpl; lia.
Qed.

(* A member of C(q, m, S, g) has maximum m and holds m exactly on S. *)
Theorem G1_signature : forall q m g s l, q <= m -> 1 <= g -> (In true s \/ q = m) ->
  member q m g (gap_kinds s) (q :: l) = true ->
  list_max (q :: l) = m /\ mask m l = s.
Proof.
  intros q m g s l Hq Hg Hs H. simpl in H. rewrite Nat.eqb_refl in H. simpl in H.
  assert (Hle := fits_le _ _ _ _ Hg H).
  apply fits_nth in H. rewrite gap_kinds_length in H. destruct H as [Hl Hi].
  assert (Hmask : mask m l = s).
  { apply (list_eq_nth _ false); [unfold mask; rewrite map_length; assumption|].
    intros i Hlt. unfold mask in Hlt; rewrite map_length in Hlt. rewrite nth_mask by assumption.
    assert (Ht := Hi i ltac:(lia)). rewrite nth_gap_kinds in Ht by lia.
    destruct (nth i s false); simpl in Ht.
    - exact Ht.
    - apply Nat.leb_le in Ht. apply Nat.eqb_neq. lia. }
  split; [|assumption]. apply max_is; [assumption | assumption |].
  destruct Hs as [Hs | ->]; [|left; reflexivity]. right.
  rewrite <- Hmask in Hs. unfold mask in Hs. apply in_map_iff in Hs.
  destruct Hs as [u [Hu Hin]]. apply Nat.eqb_eq in Hu. subst u. assumption.
Qed.

Lemma fold_gap_kinds : forall m g s, 1 <= g ->
  fold_right (fun k acc => length (alph m g k) * acc) 1 (gap_kinds s) = (m + 1 - g) ^ nfree s.
Proof.
  intros m g s Hg; unfold nfree; induction s as [|b s IH]; simpl; [reflexivity|].
  destruct b; simpl; rewrite IH; [lia|]. rewrite seq_length. reflexivity.
Qed.

(* |C(q, m, S, g)| = (m - g + 1)^(k-1-|S|) (m + 1 - g in N: 0 when g > m, as A is then
   empty; G1's side condition g <= m or S = all makes it the spec's number). *)
Theorem G1_size : forall v q m g s, 1 <= g -> q <= m -> m < v ->
  length (filter (member q m g (gap_kinds s)) (seqs v (S (length s))))
  = (m + 1 - g) ^ nfree s.
Proof.
  intros v q m g s Hg Hq Hm. rewrite <- (gap_kinds_length s).
  rewrite member_count by lia. apply fold_gap_kinds; assumption.
Qed.

(* ---- Lemma G2 (disjointness) ---- *)

Theorem G2_disjoint : forall q m g s q' m' g' s' t,
  q <= m -> 1 <= g -> (In true s \/ q = m) ->
  q' <= m' -> 1 <= g' -> (In true s' \/ q' = m') ->
  member q m g (gap_kinds s) t = true -> member q' m' g' (gap_kinds s') t = true ->
  q = q' /\ m = m' /\ s = s'.
Proof.
  intros q m g s q' m' g' s' t Hq Hg Hs Hq' Hg' Hs' H H'.
  destruct t as [|x l]; [discriminate|].
  assert (Hx : x = q) by (simpl in H; apply andb_true_iff in H; apply Nat.eqb_eq, H).
  assert (Hx' : x = q') by (simpl in H'; apply andb_true_iff in H'; apply Nat.eqb_eq, H').
  subst x. subst q'.
  destruct (G1_signature q m g s l Hq Hg Hs H) as [Hm Hsm].
  destruct (G1_signature q m' g' s' l Hq' Hg' Hs' H') as [Hm' Hsm'].
  assert (m = m') by congruence. subst m'. split; [reflexivity|]. split; congruence.
Qed.

(* ---- Lemma G4 (residue) ---- *)

(* t lies in C(q, m, S, g) iff its signature is (q, m, S) and every other non-query token is
   <= m - g: the checker's `in_class` test of a residue sequence. *)
Theorem G4_residue : forall q m g s t, q <= m -> 1 <= g -> (In true s \/ q = m) ->
  member q m g (gap_kinds s) t = true <->
  exists l, t = q :: l /\ list_max t = m /\ mask m l = s /\
            Forall (fun u => u = m \/ u + g <= m) l.
Proof.
  intros q m g s t Hq Hg Hs. split.
  - intros H. destruct t as [|x l]; [discriminate|].
    assert (Hx : x = q) by (simpl in H; apply andb_true_iff in H; apply Nat.eqb_eq, H).
    subst x. exists l. destruct (G1_signature q m g s l Hq Hg Hs H) as [Hm Hsm].
    split; [reflexivity|]. split; [assumption|]. split; [assumption|].
    simpl in H. rewrite Nat.eqb_refl in H. simpl in H.
    apply fits_nth in H. rewrite gap_kinds_length in H. destruct H as [Hl Hi].
    apply Forall_forall. intros u Hu. apply (In_nth l u 0) in Hu. destruct Hu as [i [Hi' <-]].
    assert (Ht := Hi i ltac:(lia)). rewrite nth_gap_kinds in Ht by lia.
    destruct (nth i s false); simpl in Ht; [left; apply Nat.eqb_eq, Ht|].
    right. apply Nat.leb_le, Ht.
  - intros [l [-> [Hm [Hsm Hl]]]]. simpl. rewrite Nat.eqb_refl. simpl.
    apply fits_nth. rewrite gap_kinds_length. rewrite <- Hsm. unfold mask.
    rewrite map_length. split; [reflexivity|]. intros i Hi.
    rewrite (nth_gap_kinds (map (fun u => u =? m) l)) by (rewrite map_length; assumption).
    fold (mask m l). rewrite nth_mask by assumption.
    rewrite Forall_forall in Hl. assert (Hu := Hl (nth i l 0) (nth_In l 0 Hi)).
    destruct (Nat.eqb_spec (nth i l 0) m) as [E | E]; simpl.
    + apply Nat.eqb_eq, E.
    + apply Nat.leb_le. lia.
Qed.

(* ---- Lemma G5 (merged classes) ---- *)

Lemma merged_kinds_length : forall i0 j, length (merged_kinds i0 j) = i0 + 1 + j.
Proof. intros; unfold merged_kinds; rewrite app_length, repeat_length; simpl; rewrite repeat_length; lia. Qed.

Lemma nth_merged_kinds : forall i0 j i, i < i0 + 1 + j ->
  nth i (merged_kinds i0 j) 0 = if i <? i0 then 0 else if i =? i0 then 1 else 2.
Proof.
  intros i0 j i Hi. unfold merged_kinds. destruct (Nat.ltb_spec i i0) as [H|H].
  - rewrite app_nth1 by (rewrite repeat_length; assumption). apply nth_repeat.
  - rewrite app_nth2 by (rewrite repeat_length; assumption). rewrite repeat_length.
    destruct (Nat.eqb_spec i i0) as [->|E].
    + rewrite Nat.sub_diag. reflexivity.
    + destruct (i - i0) as [|d] eqn:D; [lia|]. simpl.
      rewrite (nth_indep _ 0 2) by (rewrite repeat_length; lia). apply nth_repeat.
Qed.

Lemma first_m_spec : forall m l i,
  first_m m l = Some i <-> i < length l /\ nth i l 0 = m /\ forall i', i' < i -> nth i' l 0 <> m.
Proof.
  intros m l; induction l as [|u l IH]; intros i; simpl.
  - split; [discriminate | intros [H _]; lia].
  - destruct (Nat.eqb_spec u m) as [E | E].
    + split.
      * intros H. injection H as <-. split; [lia|]. split; [assumption | intros; lia].
      * intros [_ [Hn Hb]]. destruct i as [|i]; [reflexivity|].
        exfalso. apply (Hb 0); [lia | assumption].
    + assert (Back : forall i, (S i < S (length l) /\ nth (S i) (u :: l) 0 = m /\
                     forall i', i' < S i -> nth i' (u :: l) 0 <> m) -> first_m m l = Some i).
      { intros i' [Hl [Hn Hb]]. apply IH. split; [simpl in Hl; lia|]. split; [exact Hn|].
        intros i'' Hi''. apply (Hb (S i'')); lia. }
      destruct (first_m m l) as [i1|] eqn:F; simpl.
      * destruct (proj1 (IH i1) eq_refl) as [Hl [Hn Hb]]. split.
        -- intros H. injection H as <-.
           split; [simpl; lia|]. split; [assumption|]. intros [|i'] Hi'; [assumption|]. apply Hb; lia.
        -- intros H. destruct i as [|i]; [destruct H as [_ [Hn0 _]]; contradiction|].
           f_equal. assert (Hi := Back i H). congruence.
      * split; [discriminate|]. intros H. destruct i as [|i]; [destruct H as [_ [Hn0 _]]; contradiction|].
        assert (Hi := Back i H). congruence.
Qed.

Lemma first_true_mask : forall m l, first_true (mask m l) = first_m m l.
Proof.
  intros m l; induction l as [|u l IH]; simpl; [reflexivity|]. rewrite IH. reflexivity.
Qed.

(* (a) a member of M(q, m, i0, g) has maximum m and its first non-query m at i0 *)
Theorem G5a_block : forall q m g i0 j l, q <= m -> 1 <= g ->
  member q m g (merged_kinds i0 j) (q :: l) = true ->
  list_max (q :: l) = m /\ first_m m l = Some i0.
Proof.
  intros q m g i0 j l Hq Hg H. simpl in H. rewrite Nat.eqb_refl in H. simpl in H.
  assert (Hle := fits_le _ _ _ _ Hg H).
  apply fits_nth in H. rewrite merged_kinds_length in H. destruct H as [Hl Hi].
  assert (H0 : nth i0 l 0 = m).
  { assert (Ht := Hi i0 ltac:(lia)). rewrite nth_merged_kinds, Nat.ltb_irrefl, Nat.eqb_refl in Ht by lia.
    apply Nat.eqb_eq, Ht. }
  split.
  - apply max_is; [assumption | assumption |]. right. rewrite <- H0. apply nth_In. lia.
  - apply first_m_spec. split; [lia|]. split; [assumption|]. intros i' Hi'.
    assert (Ht := Hi i' ltac:(lia)). rewrite nth_merged_kinds in Ht by lia.
    destruct (Nat.ltb_spec i' i0); [|lia]. simpl in Ht. apply Nat.leb_le in Ht. lia.
Qed.

(* (b) M(q, m, i0, g) is the union of the C(q, m, S, g) with min S = i0 (disjoint by G2) *)
Theorem G5b_union : forall q m g i0 j t, 1 <= g ->
  member q m g (merged_kinds i0 j) t = true <->
  exists s, length s = i0 + 1 + j /\ first_true s = Some i0 /\
            member q m g (gap_kinds s) t = true.
Proof.
  intros q m g i0 j t Hg. destruct t as [|x l]; simpl.
  - split; [discriminate | intros [s [_ [_ H]]]; discriminate].
  - rewrite andb_true_iff. split.
    + intros [Hx H]. apply fits_nth in H. rewrite merged_kinds_length in H. destruct H as [Hl Hi].
      exists (mask m l). unfold mask at 1. rewrite map_length. split; [assumption|].
      split.
      * rewrite first_true_mask. apply first_m_spec. split; [lia|]. split.
        -- assert (Ht := Hi i0 ltac:(lia)).
           rewrite nth_merged_kinds, Nat.ltb_irrefl, Nat.eqb_refl in Ht by lia.
           apply Nat.eqb_eq, Ht.
        -- intros i' Hi'. assert (Ht := Hi i' ltac:(lia)). rewrite nth_merged_kinds in Ht by lia.
           destruct (Nat.ltb_spec i' i0); [|lia]. simpl in Ht. apply Nat.leb_le in Ht. lia.
      * apply andb_true_iff. split; [assumption|]. apply fits_nth.
        rewrite gap_kinds_length. unfold mask; rewrite map_length. split; [reflexivity|].
        intros i Hlt. rewrite nth_gap_kinds by (rewrite map_length; assumption).
        fold (mask m l). rewrite nth_mask by assumption.
        assert (Ht := Hi i ltac:(lia)). rewrite nth_merged_kinds in Ht by lia.
        destruct (Nat.eqb_spec (nth i l 0) m) as [E | E]; simpl; [apply Nat.eqb_eq, E|].
        destruct (i <? i0); [exact Ht|]. destruct (i =? i0); simpl in Ht.
        -- apply Nat.eqb_eq in Ht. contradiction.
        -- apply orb_true_iff in Ht. destruct Ht as [Ht|Ht]; [apply Nat.eqb_eq in Ht; contradiction|].
           exact Ht.
    + intros [s [Hs [Hf H]]]. apply andb_true_iff in H. destruct H as [Hx H]. split; [assumption|].
      apply fits_nth in H. rewrite gap_kinds_length in H. destruct H as [Hl Hi].
      apply fits_nth. rewrite merged_kinds_length. split; [lia|]. intros i Hlt.
      rewrite nth_merged_kinds by assumption.
      (* s has its first true at i0 *)
      assert (Hfs : first_true s = first_m 1 (map (fun b : bool => if b then 1 else 0) s)).
      { clear. induction s as [|b s IH]; simpl; [reflexivity|]. destruct b; simpl; [reflexivity|].
        rewrite IH. reflexivity. }
      rewrite Hfs in Hf. apply first_m_spec in Hf. destruct Hf as [_ [Hn Hb]].
      fold (gap_kinds s) in Hn, Hb.
      assert (Ht := Hi i ltac:(lia)).
      destruct (Nat.ltb_spec i i0) as [Lt|Ge].
      * assert (Hk := Hb i Lt). rewrite nth_gap_kinds in Hk, Ht by lia.
        destruct (nth i s false); [contradiction|]. exact Ht.
      * destruct (Nat.eqb_spec i i0) as [->|E].
        -- rewrite nth_gap_kinds in Hn, Ht by lia. destruct (nth i0 s false); [exact Ht|discriminate].
        -- simpl. rewrite nth_gap_kinds in Ht by lia. apply orb_true_iff.
           destruct (nth i s false); [left | right]; exact Ht.
Qed.

(* (c) |M(q, m, i0, g)| = (m - g + 1)^i0 * (m - g + 2)^(k-2-i0) *)
Theorem G5c_size : forall v q m g i0 j, 1 <= g <= m -> q <= m -> m < v ->
  length (filter (member q m g (merged_kinds i0 j)) (seqs v (S (i0 + 1 + j))))
  = (m + 1 - g) ^ i0 * (m + 2 - g) ^ j.
Proof.
  intros v q m g i0 j Hg Hq Hm. rewrite <- (merged_kinds_length i0 j).
  rewrite member_count by lia. unfold merged_kinds. rewrite fold_right_app.
  assert (H0 : forall a, fold_right (fun k acc => length (alph m g k) * acc) a (repeat 0 i0)
                         = (m + 1 - g) ^ i0 * a).
  { intros a. induction i0 as [|i0 IH]; simpl; [lia|]. rewrite seq_length, IH. lia. }
  assert (H2 : fold_right (fun k acc => length (alph m g k) * acc) 1 (repeat 2 j)
               = (m + 2 - g) ^ j).
  { induction j as [|j IH]; simpl; [reflexivity|]. rewrite app_length, seq_length, IH.
    simpl. f_equal. lia. }
  rewrite H0. simpl. rewrite H2. lia.
Qed.

(* (d) a merged class meets an unmerged one only in the same block (q, m, min S) *)
Theorem G5d_blocks : forall q m g i0 j q' m' g' s' t,
  q <= m -> 1 <= g -> q' <= m' -> 1 <= g' -> (In true s' \/ q' = m') ->
  member q m g (merged_kinds i0 j) t = true -> member q' m' g' (gap_kinds s') t = true ->
  q = q' /\ m = m' /\ first_true s' = Some i0.
Proof.
  intros q m g i0 j q' m' g' s' t Hq Hg Hq' Hg' Hs' H H'.
  destruct t as [|x l]; [discriminate|].
  assert (Hx : x = q) by (simpl in H; apply andb_true_iff in H; apply Nat.eqb_eq, H).
  assert (Hx' : x = q') by (simpl in H'; apply andb_true_iff in H'; apply Nat.eqb_eq, H').
  subst x. subst q'.
  destruct (G5a_block q m g i0 j l Hq Hg H) as [Hm Hf].
  destruct (G1_signature q m' g' s' l Hq' Hg' Hs' H') as [Hm' Hsm'].
  rewrite Hm in Hm'. subst m'. split; [reflexivity|]. split; [reflexivity|].
  rewrite <- Hsm', first_true_mask. assumption.
Qed.

(* two merged classes of different blocks are disjoint *)
Theorem G5d_merged : forall q m g i0 j q' m' g' i0' j' t,
  q <= m -> 1 <= g -> q' <= m' -> 1 <= g' ->
  member q m g (merged_kinds i0 j) t = true -> member q' m' g' (merged_kinds i0' j') t = true ->
  q = q' /\ m = m' /\ i0 = i0'.
Proof.
  intros q m g i0 j q' m' g' i0' j' t Hq Hg Hq' Hg' H H'.
  destruct t as [|x l]; [discriminate|].
  assert (Hx : x = q) by (simpl in H; apply andb_true_iff in H; apply Nat.eqb_eq, H).
  assert (Hx' : x = q') by (simpl in H'; apply andb_true_iff in H'; apply Nat.eqb_eq, H').
  subst x. subst q'.
  destruct (G5a_block q m g i0 j l Hq Hg H) as [Hm Hf].
  destruct (G5a_block q m' g' i0' j' l Hq' Hg' H') as [Hm' Hf'].
  rewrite Hm in Hm'. subst m'. split; [reflexivity|]. split; [reflexivity|].
  congruence.
Qed.

(* (e) residue: t lies in M(q, m, i0, g) iff its block is (q, m, i0) and every non-query token
   other than m is <= m - g *)
Theorem G5e_residue : forall q m g i0 j t, q <= m -> 1 <= g ->
  member q m g (merged_kinds i0 j) t = true <->
  exists l, t = q :: l /\ length l = i0 + 1 + j /\ list_max t = m /\ first_m m l = Some i0 /\
            Forall (fun u => u = m \/ u + g <= m) l.
Proof.
  intros q m g i0 j t Hq Hg. split.
  - intros H. destruct t as [|x l]; [discriminate|].
    assert (Hx : x = q) by (simpl in H; apply andb_true_iff in H; apply Nat.eqb_eq, H).
    subst x. exists l. destruct (G5a_block q m g i0 j l Hq Hg H) as [Hm Hf].
    simpl in H. rewrite Nat.eqb_refl in H. simpl in H.
    apply fits_nth in H. rewrite merged_kinds_length in H. destruct H as [Hl Hi].
    split; [reflexivity|]. split; [assumption|]. split; [assumption|]. split; [assumption|].
    apply Forall_forall. intros u Hu. apply (In_nth l u 0) in Hu. destruct Hu as [i [Hi' <-]].
    assert (Ht := Hi i ltac:(lia)). rewrite nth_merged_kinds in Ht by lia.
    destruct (i <? i0); [right; apply Nat.leb_le, Ht|].
    destruct (i =? i0); [left; apply Nat.eqb_eq, Ht|].
    apply orb_true_iff in Ht. destruct Ht as [Ht|Ht]; [left; apply Nat.eqb_eq, Ht|].
    right; apply Nat.leb_le, Ht.
  - intros [l [-> [Hl [Hm [Hf HF]]]]]. simpl. rewrite Nat.eqb_refl. simpl.
    apply first_m_spec in Hf. destruct Hf as [_ [Hn Hb]].
    apply fits_nth. rewrite merged_kinds_length. split; [assumption|]. intros i Hlt.
    rewrite nth_merged_kinds by assumption. rewrite Forall_forall in HF.
    assert (Hu := HF (nth i l 0) (@nth_In nat i l 0 ltac:(lia))).
    destruct (Nat.ltb_spec i i0) as [Lt|Ge].
    + assert (Hk := Hb i Lt). apply Nat.leb_le. lia.
    + destruct (Nat.eqb_spec i i0) as [->|E]; [apply Nat.eqb_eq, Hn|].
      apply orb_true_iff. destruct (Nat.eqb_spec (nth i l 0) m) as [E'|E'];
        [left; reflexivity | right; apply Nat.leb_le; lia].
Qed.

(* ---- Box classes (spec/rules.md §Rule family_gap: box classes, Lemmas B1-B3) ----
   A box gives each non-query position a set (lo, hi, e): {lo, ..., hi} ∪ ({m} if e),
   with hi < m (the checker's `box_signature`); `in_set` is the checker's membership test
   (`in_class`) and `sets_disjoint` its disjointness test (`sets_disjoint`). *)

Definition in_set (m : nat) (x : nat * nat * bool) (u : nat) : bool :=
  let '(lo, hi, e) := x in ((lo <=? u) && (u <=? hi)) || (e && (u =? m)).

Definition sets_disjoint (x y : nat * nat * bool) : bool :=
  let '(lo1, hi1, e1) := x in
  let '(lo2, hi2, e2) := y in
  ((hi1 <? lo1) || (hi2 <? lo2) || (hi1 <? lo2) || (hi2 <? lo1)) && negb (e1 && e2).

Definition hi_of (x : nat * nat * bool) : nat := let '(_, hi, _) := x in hi.

Fixpoint fits_box (m : nat) (xs : list (nat * nat * bool)) (l : list nat) : bool :=
  match xs, l with
  | [], [] => true
  | x :: xs', u :: l' => in_set m x u && fits_box m xs' l'
  | _, _ => false
  end.

Definition box_member (q m : nat) (xs : list (nat * nat * bool)) (t : list nat) : bool :=
  match t with
  | [] => false
  | q' :: l => (q' =? q) && fits_box m xs l
  end.

(* Lemma B2 (a): disjoint sets by the checker's test have no common token. *)
Theorem B2a_sets : forall m x y u, hi_of x < m -> hi_of y < m ->
  sets_disjoint x y = true -> in_set m x u = true -> in_set m y u = true -> False.
Proof.
  intros m [[lo1 hi1] e1] [[lo2 hi2] e2] u; simpl. intros H1 H2 Hd Hx Hy.
  apply andb_true_iff in Hd. destruct Hd as [Ho He].
  rewrite !orb_true_iff, !Nat.ltb_lt in Ho.
  rewrite orb_true_iff, !andb_true_iff, Nat.leb_le, Nat.leb_le, Nat.eqb_eq in Hx, Hy.
  destruct e1, e2; simpl in He; try discriminate;
    destruct Hx as [Hx|Hx]; destruct Hy as [Hy|Hy];
    repeat match goal with H : _ /\ _ |- _ => destruct H end; try discriminate; lia.
Qed.

Lemma fits_box_nth : forall m xs l,
  fits_box m xs l = true <->
  length l = length xs /\
  forall i, i < length xs -> in_set m (nth i xs (0, 0, false)) (nth i l 0) = true.
Proof.
  intros m xs; induction xs as [|x xs IH]; intros [|u l]; simpl.
  - split; [intros _; split; [reflexivity | intros; lia] | reflexivity].
  - split; [discriminate | intros [H _]; discriminate].
  - split; [discriminate | intros [H _]; discriminate].
  - rewrite andb_true_iff, IH. split.
    + intros [Hu [Hl Hi]]. split; [lia|]. intros [|i] Hlt; [assumption|]. apply Hi; lia.
    + intros [Hl Hi]. split; [apply (Hi 0); lia|]. split; [lia|].
      intros i Hlt. apply (Hi (S i)); lia.
Qed.

(* Lemma B2 (b): two boxes of one (q, m) with disjoint sets at some position are disjoint. *)
Theorem B2b_boxes : forall q m xs ys t i, i < length xs ->
  hi_of (nth i xs (0, 0, false)) < m -> hi_of (nth i ys (0, 0, false)) < m ->
  sets_disjoint (nth i xs (0, 0, false)) (nth i ys (0, 0, false)) = true ->
  box_member q m xs t = true -> box_member q m ys t = true -> False.
Proof.
  intros q m xs ys t i Hi H1 H2 Hd Hx Hy.
  destruct t as [|x l]; [discriminate|]. simpl in Hx, Hy.
  apply andb_true_iff in Hx, Hy. destruct Hx as [_ Hx]. destruct Hy as [_ Hy].
  apply fits_box_nth in Hx, Hy. destruct Hx as [Hlx Hx]. destruct Hy as [Hly Hy].
  apply (B2a_sets m _ _ (nth i l 0) H1 H2 Hd); [apply Hx; assumption|].
  apply Hy. lia.
Qed.

Lemma in_set_le : forall m x u, hi_of x < m -> in_set m x u = true -> u <= m.
Proof.
  intros m [[lo hi] e] u; simpl. intros H Hu.
  rewrite orb_true_iff, !andb_true_iff, Nat.leb_le, Nat.leb_le, Nat.eqb_eq in Hu.
  destruct Hu as [[_ Hu]|[_ Hu]]; lia.
Qed.

(* Lemma B1 (label): a box whose intervals lie below m, with m the query or some position's
   set, holds only sequences of maximum m. *)
Theorem B1_label : forall q m xs l, q <= m ->
  Forall (fun x => hi_of x < m) xs -> (q = m \/ In m l) ->
  box_member q m xs (q :: l) = true -> list_max (q :: l) = m.
Proof.
  intros q m xs l Hq Hxs Hin H. simpl in H. apply andb_true_iff in H. destruct H as [_ H].
  apply max_is; [assumption| |destruct Hin as [->|Hin]; [left; reflexivity|right; assumption]].
  apply fits_box_nth in H. destruct H as [Hl Hi]. apply Forall_forall. intros u Hu.
  apply (In_nth l u 0) in Hu. destruct Hu as [i [Hlt <-]].
  apply (in_set_le m (nth i xs (0, 0, false))); [|apply Hi; lia].
  rewrite Forall_forall in Hxs. apply Hxs, nth_In. lia.
Qed.

Definition box_alph (m : nat) (x : nat * nat * bool) : list nat :=
  let '(lo, hi, e) := x in seq lo (S hi - lo) ++ (if e then [m] else []).

Lemma In_box_alph : forall m x u, In u (box_alph m x) <-> in_set m x u = true.
Proof.
  intros m [[lo hi] e] u. unfold box_alph, in_set. remember (S hi - lo) as n eqn:Hn.
  rewrite in_app_iff, in_seq, orb_true_iff, !andb_true_iff, Nat.leb_le, Nat.leb_le.
  destruct e; simpl.
  - rewrite Nat.eqb_eq. split.
    + intros [H|[H|[]]]; [left; split; lia | right; split; [reflexivity | lia]].
    + intros [[H1 H2]|[_ H]]; [left; lia | right; left; lia].
  - split.
    + intros [H|[]]; left; split; lia.
    + intros [[H1 H2]|[H _]]; [left; lia | discriminate].
Qed.

Lemma NoDup_box_alph : forall m x, hi_of x < m -> NoDup (box_alph m x).
Proof.
  intros m [[lo hi] e] H. unfold box_alph, hi_of in *. simpl in H.
  remember (S hi - lo) as n eqn:Hn. simpl. destruct e.
  - apply NoDup_app'; [apply seq_NoDup | constructor; [intros []|constructor] |].
    intros u Hu [<-|[]]. apply in_seq in Hu. lia.
  - rewrite app_nil_r. apply seq_NoDup.
Qed.

(* Lemma B1 (size): a box's members among all sequences number the product of its
   positions' set sizes, (hi + 1 - lo) + e each (the checker's `class_size`). *)
Theorem B1_size : forall v q m xs, q < v -> m < v -> Forall (fun x => hi_of x < m) xs ->
  length (filter (box_member q m xs) (seqs v (S (length xs))))
  = fold_right (fun x acc => length (box_alph m x) * acc) 1 xs.
Proof.
  intros v q m xs Hq Hm Hxs.
  transitivity (length (map (cons q) (prod (map (box_alph m) xs)))).
  - apply filter_count.
    + apply NoDup_seqs.
    + apply NoDup_map_cons, NoDup_prod. rewrite Forall_forall. intros G HG.
      apply in_map_iff in HG. destruct HG as [x [<- Hx]]. apply NoDup_box_alph.
      rewrite Forall_forall in Hxs. apply Hxs, Hx.
    + assert (Hfp : forall l, fits_box m xs l = true <-> In l (prod (map (box_alph m) xs))).
      { intros l. rewrite fits_box_nth, In_prod, map_length. split.
        - intros [Hl Hi]. split; [assumption|]. intros i Hlt.
          rewrite (nth_indep _ [] (box_alph m (0, 0, false))) by (rewrite map_length; lia).
          rewrite map_nth. apply In_box_alph, Hi, Hlt.
        - intros [Hl Hi]. split; [assumption|]. intros i Hlt. apply In_box_alph.
          assert (H := Hi i Hlt).
          rewrite (nth_indep _ [] (box_alph m (0, 0, false))) in H by (rewrite map_length; lia).
          rewrite map_nth in H. exact H. }
      intros t. rewrite in_map_iff. split.
      * intros [l [<- Hl]]. apply Hfp in Hl. split.
        -- apply In_seqs. split; [simpl; f_equal; apply fits_box_nth in Hl; apply Hl|].
           constructor; [assumption|]. apply fits_box_nth in Hl. destruct Hl as [Hl Hi].
           apply Forall_forall. intros u Hu. apply (In_nth l u 0) in Hu.
           destruct Hu as [i [Hlt <-]].
           assert (Hle := in_set_le m (nth i xs (0, 0, false)) (nth i l 0)).
           rewrite Forall_forall in Hxs.
           assert (nth i l 0 <= m) by (apply Hle; [apply Hxs, nth_In; lia | apply Hi; lia]).
           lia.
        -- simpl. rewrite Nat.eqb_refl, Hl. reflexivity.
      * intros [_ Ht]. destruct t as [|q' l]; [discriminate|]. simpl in Ht.
        apply andb_true_iff in Ht. destruct Ht as [Hq' Hl]. apply Nat.eqb_eq in Hq'.
        subst q'. exists l. split; [reflexivity|]. apply Hfp; assumption.
  - rewrite map_length, length_prod. clear. induction xs as [|x xs IH]; simpl;
      [reflexivity | rewrite IH; reflexivity].
Qed.

(* Lemma B2 (d): the classes are boxes.  Every kind's alphabet is a box set: kind 0 is
   [0, m-g] without m, kind 1 is {m} (an empty interval with m), kind 2 is [0, m-g] ∪ {m}. *)
Definition kind_set (m g k : nat) : nat * nat * bool :=
  match k with
  | 0 => (0, m - g, false)
  | 1 => (1, 0, true)
  | _ => (0, m - g, true)
  end.

Theorem B2d_kinds : forall m g k u, 1 <= g <= m -> in_set m (kind_set m g k) u = tok m g k u.
Proof.
  intros m g k u Hg. destruct k as [|[|k]]; unfold kind_set, in_set, tok; cbv beta iota zeta;
    destruct (Nat.leb_spec 0 u), (Nat.leb_spec 1 u), (Nat.leb_spec u 0),
      (Nat.leb_spec u (m - g)), (Nat.leb_spec (u + g) m), (Nat.eqb_spec u m);
    simpl; try reflexivity; lia.
Qed.
